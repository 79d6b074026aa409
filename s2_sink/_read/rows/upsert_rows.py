"""``s2.format=upsert``'s rows from record columns: ``stream, seq_num, timestamp, key, action, value``, or
typed (a user schema) the key JSON spliced with the value JSON and decoded; ``s2.upsert-materialize``
keeps each key's latest change.

Splicing the texts, ``{k...} + {v...} -> {k...,v...}``, rather than parsing and re-serializing keeps
numbers' digits as written; whitespace next to the braces is stripped by moving span bounds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Final, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StructType

from s2_sink._read.rows.record_rows import decoded_batch
from s2_sink._wire.columns import (
    Bools,
    Bytes,
    Ints,
    RecordColumns,
    StreamRuns,
    binary_view,
    bool_array,
    bools,
    call,
    concat_columns,
    first_header,
    repeated,
    rows_batch,
    take_or_null,
    utf8_text,
    valid_rows,
)
from s2_sink.encoders._changelog import ACTION_HEADER, KEY_HEADER
from s2_sink.errors import ReadError

__all__ = [
    "ACTION_HEADER",
    "KEY_HEADER",
    "Changes",
    "changes",
    "changes_batch",
    "latest_changes",
    "materialized_batches",
    "merged_bodies",
    "splice_objects",
    "typed_batch",
]


class Changes(NamedTuple):
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
    """Where ``arr`` holds the one byte ``byte``, by numpy (a `pa.scalar` would import pandas in a fresh
    worker)."""
    offsets, data = binary_view(arr)
    one = (offsets[1:] - offsets[:-1]) == 1
    hits: Bools = one & valid_rows(arr)
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


def _actions(found: Changes) -> pa.Array:
    deletes, n = bool_array(found.deletes), len(found.deletes)
    return pc.if_else(deletes, repeated(b"d", n, pa.string()), repeated(b"u", n, pa.string()))


def merged_bodies(stream: str, columns: RecordColumns) -> tuple[pa.Array, Changes]:
    """Per record, its key's JSON object spliced with its value's (``{}`` for a delete or an empty body), and
    the changes; ReadError for the first malformed record."""
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
    """The records holding each key's latest change in ``parts`` (one stream's, in order) when it is an
    update, in seq_num order, ``rows`` at a time. Only the keys are put together across parts: no array ever
    holds the whole stream's bodies (Arrow's binary arrays end at 2 GiB)."""
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
    """The records at positions ``at`` of ``parts`` laid end to end, in that order."""
    owner = np.searchsorted(starts, at, side="right") - 1
    by_part = np.argsort(owner, kind="stable")
    pieces = [parts[p].take(at[by_part][owner[by_part] == p] - starts[p]) for p in np.unique(owner).tolist()]
    grouped = concat_columns(pieces)
    if np.array_equal(by_part, np.arange(len(at))):
        return grouped
    return grouped.take(np.argsort(by_part))


def changes_batch(
    schema: StructType, stream: str | StreamRuns, columns: RecordColumns, target: pa.Schema
) -> pa.RecordBatch:
    found = changes(_named(stream), columns)
    n = len(columns)
    from_record = {  # as text; the value is null for a delete
        "key": lambda: utf8_text(found.keys),
        "action": lambda: _actions(found),
        "value": lambda: pc.if_else(
            bool_array(found.deletes), repeated(None, n, pa.string()), utf8_text(columns.bodies)
        ),
    }
    return rows_batch(target, stream, columns, from_record)


def typed_batch(
    schema: StructType, stream: str | StreamRuns, columns: RecordColumns, target: pa.Schema
) -> pa.RecordBatch:
    bodies, found = merged_bodies(_named(stream), columns)
    return decoded_batch(schema, stream, columns, bodies, target, action=_actions(found))


def _named(stream: str | StreamRuns) -> str:
    return stream if isinstance(stream, str) else repr(stream)


Batch = Callable[[StructType, str, RecordColumns, pa.Schema], pa.RecordBatch]


def materialized_batches(
    to_batch: Batch,
    schema: StructType,
    stream: str,
    parts: Iterable[RecordColumns],
    target: pa.Schema,
    *,
    rows: int = 1000,
) -> Iterator[pa.RecordBatch]:
    """``to_batch`` of each key's latest change among the data records of ``parts`` (one stream's, in order),
    ``rows`` records a batch."""
    data = [p.take(~commands) if (commands := p.commands()).any() else p for p in parts]
    for latest in latest_changes(stream, data, rows):
        yield to_batch(schema, stream, latest, target)


_SPACE: Final = np.zeros(256, dtype=np.bool_)
_SPACE[list(b" \t\n\r\x0b\x0c")] = True
_OPEN, _CLOSE = ord("{"), ord("}")


def splice_objects(keys: pa.Array, values: pa.Array) -> tuple[pa.Array, Bools]:
    """Per record, the object spliced from ``keys[i]`` and ``values[i]`` (nulls read as empty), and where a
    side is not a JSON object (its result is ``{}``)."""
    k_inner, k_bad = _inner(keys)
    v_inner, v_bad = _inner(values)
    bad = k_bad | v_bad
    if bad.any():
        blank, nothing = bool_array(bad), repeated(b"", len(bad), pa.binary())
        k_inner, v_inner = pc.if_else(blank, nothing, k_inner), pc.if_else(blank, nothing, v_inner)
    k_len = binary_view(k_inner).lengths * valid_rows(k_inner)  # nulls read as empty
    v_len = binary_view(v_inner).lengths * valid_rows(v_inner)
    n = len(bad)
    both = bool_array((k_len > 0) & (v_len > 0))
    comma = pc.if_else(both, repeated(b",", n, pa.binary()), repeated(b"", n, pa.binary()))
    inner = pc.binary_join_element_wise(k_inner, v_inner, comma)
    merged = pc.binary_join_element_wise(
        repeated(b"{", n, pa.binary()), inner, repeated(b"}", n, pa.binary()), repeated(b"", n, pa.binary())
    )
    return merged, bad


def _inner(arr: pa.Array) -> tuple[pa.Array, Bools]:
    """Per value, the text inside its braces, stripped, and where the value is not ``{...}``."""
    offsets, data = binary_view(arr)
    if _compact(data, offsets[:-1], offsets[1:]):
        return pc.binary_slice(arr, 1, -1), np.zeros(len(arr), dtype=np.bool_)
    # Byte by byte (an ASCII kernel does not check UTF-8): the bytes are the record's, whatever they hold.
    text = pc.ascii_trim_whitespace(arr.view(pa.string()))
    braced = pc.and_(pc.starts_with(text, "{"), pc.ends_with(text, "}"))
    braced = pc.and_(braced, pc.greater_equal(pc.binary_length(text), 2))
    inner = pc.ascii_trim_whitespace(pc.binary_slice(text.view(pa.binary()), 1, -1).view(pa.string()))
    return inner.view(pa.binary()), ~bools(braced)


def _compact(data: Bytes, start: Ints, stop: Ints) -> bool:
    """Every value is ``{...}`` with no whitespace to strip (what JSON encoders write): settled in a few
    passes."""
    if not (stop - start >= 2).all():
        return False
    braced = (data[start] == _OPEN) & (data[stop - 1] == _CLOSE)
    return bool(braced.all()) and not (_SPACE[data[start + 1]] | _SPACE[data[stop - 2]]).any()
