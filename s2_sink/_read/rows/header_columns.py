"""The columns ``s2.format=kafka`` and ``s2.format=upsert`` take from records' headers, for all records at
once (over `s2_sink._wire.columns.RecordColumns`).

Headers: a record's headers are the entries ``header_offsets[i]:header_offsets[i + 1]`` of ``names`` /
``values``, so "the first header named X of every record" is one comparison over all names and a pass over
the hits. Text: binary -> text exactly as Python's ``bytes.decode("utf-8", errors="replace")``: Arrow's cast
validates UTF-8 as strictly as Python, so an array that casts is the text Python gives; an array holding any
invalid value is decoded value by value (the odd input, paid for only by the batches that carry it).

Kafka: ``key`` is the value of the record's first ``@kafka-key`` header (the one `encoders.KafkaEncoder`
writes first), null without one; ``headers`` the record's headers in order, without that first key header
(a later ``@kafka-key`` is user data and stays) and without every exactly-once chunk tag ``@s2sink`` (the
sink's bookkeeping: written back, it would claim a foreign chunk), names as text; ``value`` the body.

Upsert: each record's change, the text columns, the spliced key + value JSON of a typed read, and the
latest change per key (materialize). A change record carries its key in its first ``@key`` header and its
action in its first ``@action`` header (``u`` or ``d``); the body is the value (see `encoders._upsert`). A
record without both fails the read (`ReadError` naming the first such record), as does, for a typed read, a
key or value that is not a JSON object.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink._read.rows.json_splice import splice_objects
from s2_sink._wire.columns import (
    RecordColumns,
    binary_view,
    bool_array,
    bools,
    call,
    concat_columns,
    int32_array,
    int64_array,
    repeated,
    take,
    valid_rows,
    validity,
)
from s2_sink._wire.layout import Bools, Ints
from s2_sink.encoders._kafka import KAFKA_KEY_HEADER
from s2_sink.errors import ReadError

__all__ = [
    "ACTION_HEADER",
    "KAFKA_RECORD_COLUMNS",
    "KEY_HEADER",
    "UPSERT_RECORD_COLUMNS",
    "Changes",
    "changes",
    "kafka_column",
    "latest_changes",
    "merged_bodies",
    "upsert_column",
]

KEY_HEADER: Final = b"@key"
ACTION_HEADER: Final = b"@action"
UPSERT_RECORD_COLUMNS: Final = frozenset({"key", "action", "value"})
"""The upsert columns built here; the others are the record's position."""


class Changes(NamedTuple):
    """Every record's change."""

    keys: pa.Array
    """``binary``: the first ``@key`` header's value (null where there is none)."""
    updates: Bools
    """The first ``@action`` header is ``u``."""
    deletes: Bools
    """The first ``@action`` header is ``d``."""

    @property
    def malformed(self) -> Bools:
        """No ``@key`` header, or no ``@action`` header of ``u`` or ``d``."""
        no_key: Bools = ~valid_rows(self.keys)
        return no_key | ~(self.updates | self.deletes)


def _read_changes(columns: RecordColumns) -> Changes:
    actions = take_or_null(columns.values, first_header(columns, ACTION_HEADER))
    return Changes(
        take_or_null(columns.values, first_header(columns, KEY_HEADER)),
        _is(actions, ord("u")),
        _is(actions, ord("d")),
    )


def _is(arr: pa.Array, byte: int) -> Bools:
    """Where `arr` holds the one byte `byte` (null: no). By numpy over the buffers: a `pa.scalar` would
    import pandas in the read task's fresh worker."""
    offsets, data = binary_view(arr)
    one = (offsets[1:] - offsets[:-1]) == 1
    hits: Bools = one & validity(arr)
    hits[hits] = data[offsets[:-1][hits]] == byte
    return hits


def changes(stream: str, columns: RecordColumns) -> Changes:
    """Every record's change; ReadError for the first record without a key or a valid action."""
    found = _read_changes(columns)
    malformed = found.malformed
    if malformed.any():
        raise _malformed(stream, columns, int(np.argmax(malformed)))
    return found


def _malformed(stream: str, columns: RecordColumns, i: int) -> ReadError:
    offsets = columns.header_offsets
    names = columns.names[int(offsets[i]) : int(offsets[i + 1])].to_pylist()
    return ReadError(
        f"s2.format=upsert: record {int(columns.seq_nums[i])} of stream {stream!r} has no @key header or no "
        f"@action header of 'u' or 'd' (headers {names!r})"
    )


def upsert_column(name: str, found: Changes, columns: RecordColumns) -> pa.Array:
    """The upsert column ``name`` (one of `UPSERT_RECORD_COLUMNS`) as text: the value is null for a delete."""
    if name == "key":
        return utf8_text(found.keys)
    deletes, n = bool_array(found.deletes), len(found.deletes)
    if name == "action":
        return pc.if_else(deletes, repeated(b"d", n, pa.string()), repeated(b"u", n, pa.string()))
    if name == "value":
        return pc.if_else(deletes, repeated(None, n, pa.string()), utf8_text(columns.bodies))
    raise ValueError(f"{name!r} is not an upsert record column")


def merged_bodies(stream: str, columns: RecordColumns) -> tuple[pa.Array, Changes]:
    """Per record, its key's JSON object spliced with its value's (``{}`` for a delete or an empty body),
    and the changes; ReadError for the first record malformed either way."""
    found = _read_changes(columns)
    lengths = binary_view(columns.bodies).lengths
    with_body = bool_array(found.updates & (lengths > 0))
    values = pc.if_else(with_body, columns.bodies, repeated(b"{}", len(lengths), pa.binary()))
    merged, not_objects = splice_objects(found.keys, values)
    malformed = found.malformed
    bad = malformed | not_objects
    if bad.any():
        i = int(np.argmax(bad))
        if malformed[i]:
            raise _malformed(stream, columns, i)
        raise ReadError(
            f"s2.format=upsert: record {int(columns.seq_nums[i])} of stream {stream!r} has a key or value "
            "that is not a JSON object"
        )
    return merged, found


def latest_changes(stream: str, parts: Sequence[RecordColumns], rows: int) -> Iterator[RecordColumns]:
    """The records that hold each key's latest change in ``parts`` (one stream's records, in order) when it
    is an update (a key whose latest change is a delete is gone), in seq_num order, ``rows`` at a time;
    ReadError for the first record without a key or a valid action.

    Only the keys are put together across parts: a part's bodies stay where they are until a record of
    it survives, so no array ever holds the whole stream's bodies (Arrow's binary arrays end at 2 GiB).
    """
    found = [changes(stream, part) for part in parts]
    if not sum(len(part) for part in parts):
        return
    keys = pa.concat_arrays([f.keys.cast(pa.large_binary()) for f in found])
    updates = np.concatenate([f.updates for f in found])
    seq_nums = np.concatenate([part.seq_nums for part in parts])
    # Each key's last change in stream order; sorted, these are the order a dict keyed by key would keep.
    # (Arrow's group_by would import pyarrow.dataset, and with it pandas: the keys' codes and numpy instead.)
    codes = call("dictionary_encode", [keys])
    code = np.frombuffer(
        codes.indices.buffers()[1], dtype=np.int32, count=len(keys), offset=codes.indices.offset * 4
    )
    last = np.full(len(codes.dictionary), -1, dtype=np.int64)
    np.maximum.at(last, code, np.arange(len(keys), dtype=np.int64))
    last.sort()
    kept = last[updates[last]]
    kept = kept[np.argsort(seq_nums[kept], kind="stable")]
    starts = np.cumsum([0] + [len(part) for part in parts[:-1]])
    for i in range(0, len(kept), rows):
        yield _rows(parts, starts, kept[i : i + rows])


def _rows(parts: Sequence[RecordColumns], starts: Ints, at: Ints) -> RecordColumns:
    """The records at the positions ``at`` of ``parts`` laid end to end, in that order."""
    owner = np.searchsorted(starts, at, side="right") - 1
    by_part = np.argsort(owner, kind="stable")
    pieces = [parts[p].take(at[by_part][owner[by_part] == p] - starts[p]) for p in np.unique(owner).tolist()]
    grouped = concat_columns(pieces)
    if np.array_equal(by_part, np.arange(len(at))):
        return grouped
    return grouped.take(np.argsort(by_part))


def entry_owners(columns: RecordColumns) -> Ints:
    """The record of every header entry."""
    owners: Ints = np.repeat(np.arange(len(columns), dtype=np.int64), columns.header_counts)
    return owners


def named(columns: RecordColumns, name: bytes) -> Bools:
    """True for every header entry called ``name``."""
    same = call("equal", [columns.names, repeated(name, len(columns.names), pa.binary())])
    return bools(same)


def first_header(columns: RecordColumns, name: bytes, owners: Ints | None = None) -> Ints:
    """Per record, the entry of its first header called ``name``; -1 where it has none."""
    first = np.full(len(columns), -1, dtype=np.int64)
    hits = np.flatnonzero(named(columns, name))
    if hits.size:
        whose = (entry_owners(columns) if owners is None else owners)[hits]
        # Entries are in record order: a record's first hit is where the owner changes.
        leads = np.ones(hits.size, dtype=np.bool_)
        leads[1:] = whose[1:] != whose[:-1]
        first[whose[leads]] = hits[leads]
    return first


def take_or_null(arr: pa.Array, index: Ints) -> pa.Array:
    """``arr`` at ``index``, null where the index is -1."""
    taken: pa.Array = call("take", [arr, int64_array(index, valid=index >= 0)])
    return taken


def utf8_text(arr: pa.Array) -> pa.Array:
    """``arr`` (binary) as a string array, invalid UTF-8 sequences replaced by U+FFFD; nulls stay null."""
    try:
        return arr.cast(pa.string())
    except pa.ArrowInvalid:
        values: list[bytes | None] = arr.to_pylist()
        return pa.array(
            [None if v is None else v.decode("utf-8", errors="replace") for v in values], type=pa.string()
        )


KAFKA_RECORD_COLUMNS: Final = frozenset({"key", "value", "headers"})
"""The kafka columns built here; the others are the record's position."""


def kafka_column(name: str, columns: RecordColumns) -> pa.Array:
    """The kafka column ``name`` (one of `KAFKA_RECORD_COLUMNS`) of every record."""
    if name == "value":
        return columns.bodies
    if name == "key":
        return take_or_null(columns.values, first_header(columns, KAFKA_KEY_HEADER))
    if name == "headers":
        return _user_headers(columns)
    raise ValueError(f"{name!r} is not a kafka record column")


def _user_headers(columns: RecordColumns) -> pa.Array:
    owners = entry_owners(columns)
    keep = ~named(columns, TAG_HEADER)
    key = first_header(columns, KAFKA_KEY_HEADER, owners)
    keep[key[key >= 0]] = False
    kept = np.flatnonzero(keep)
    offsets = np.zeros(len(columns) + 1, dtype=np.int32)
    np.cumsum(np.bincount(owners[kept], minlength=len(columns)), out=offsets[1:])
    entries = pa.StructArray.from_arrays(
        [utf8_text(take(columns.names, kept)), take(columns.values, kept)], names=["key", "value"]
    )
    return pa.ListArray.from_arrays(int32_array(offsets), entries)
