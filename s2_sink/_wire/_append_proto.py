"""Serialized ``AppendInput`` messages (s2.v1 protobuf), one per chunk of a record frame, built in bulk.

The record frame's columns (see `s2_sink.encoders._frame`) become the exact bytes the SDK would send
for the same records (``s2_sdk._mappers.append_input_to_proto(...).SerializeToString()``), without a
Python object per record. The messages::

    AppendInput  = { AppendRecord records = 1 (repeated); uint64 match_seq_num = 2 (optional);
                     string fencing_token = 3 (optional) }
    AppendRecord = { uint64 timestamp = 1 (optional); Header headers = 2 (repeated); bytes body = 3 }
    Header       = { bytes name = 1; bytes value = 2 }

Fields are written in field-number order, as protobuf serializers do; proto3 ``bytes`` fields without
presence (body, header name and value) are omitted when empty, ``optional`` ones are written whenever
set (a timestamp of 0, an empty fencing token).

How: numpy computes every field's size over whole columns and packs the small parts (keys and
varints) row by row; Arrow's ``binary_join_element_wise`` then concatenates, row by row, those parts
with the Arrow buffers' own bytes (names, values, bodies) in C++. Header entries are joined first;
a record's headers are then a contiguous run of the joined entries, taken as one value by offsets
alone. Leading headers (one name for every row, a value column, e.g. the upsert ``@key``/``@action``)
need no list at all: their fields are joined straight into the record, ahead of its own headers.
The records come out back to back in one buffer, each chunk's trailer (match_seq_num, fencing
token) joined after its last record, so a chunk is one slice of that buffer.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink._wire._arrow_views import as_large_binary, binary_view, large_binary, validity
from s2_sink._wire._layout import Bools, Bytes, Ints, pack_fields, varint_sizes
from s2_sink.encoders._frame import BODY, HEADERS, TIMESTAMP
from s2_sink.errors import EncodeError

__all__ = [
    "EncodedRecords",
    "LeadingHeader",
    "encode_append_inputs",
    "encode_records",
    "fencing_token_field",
    "record_field",
]

# Field keys: (field number << 3) | wire type (0 = varint, 2 = length-delimited).
_INPUT_RECORDS: Final = 0x0A
_INPUT_MATCH_SEQ_NUM: Final = 0x10
_INPUT_FENCING_TOKEN: Final = 0x1A
_RECORD_TIMESTAMP: Final = 0x08
_RECORD_HEADERS: Final = 0x12
_RECORD_BODY: Final = 0x1A
_HEADER_NAME: Final = 0x0A
_HEADER_VALUE: Final = 0x12

_U64_LIMIT: Final = 1 << 64

# Block size: temporaries of a few hundred KiB stay in cache and in memory the allocator reuses
# (fresh pages cost more than the encoding itself on some virtual machines).
_BLOCK_ROWS: Final = 16_384
_BLOCK_BYTES: Final = 4 * 1024 * 1024

Header = tuple[bytes, bytes]
LeadingHeader = tuple[bytes, pa.Array]
"""A header every row carries first: its name, and a binary column of each row's value."""


def encode_append_inputs(
    body: pa.Array,
    headers: pa.Array | None,
    timestamp: pa.Array | None,
    bounds: npt.ArrayLike,
    *,
    fencing_token: str | None,
    match_seq_nums: Sequence[int | None] | None = None,
    first_record_headers: Sequence[Sequence[Header]] | None = None,
    leading: Sequence[LeadingHeader] = (),
) -> list[bytes]:
    """One serialized ``AppendInput`` per chunk; chunk ``i`` holds rows ``bounds[i]:bounds[i + 1]``.

    ``body`` is the frame's ``_s2_body`` (binary or large_binary, no nulls), ``headers`` its
    ``_s2_headers`` (``list<struct<name: binary, value: binary>>``, a null row = no headers) and
    ``timestamp`` its ``_s2_timestamp`` (int64 ms, a null row = unset); ``None`` for a column = no row
    has one. ``bounds`` must increase strictly (an append holds at least one record) within
    ``[0, len(body)]``. Every chunk carries ``fencing_token`` (when not ``None``) and
    ``match_seq_nums[i]`` (when given and not ``None``). ``first_record_headers[i]`` is appended after
    the own headers of chunk ``i``'s first record (the exactly-once chunk tag goes last, see
    `s2_sink._exactly_once._tags`). ``leading`` headers come first in every record, in the order
    given, before its own ``headers``.

    Raises EncodeError for a row S2 cannot take (null body, null header name or value, negative
    timestamp) and ValueError for arguments that do not fit together.
    """
    body = as_large_binary(body, BODY)  # shares the data buffer
    _check_leading(leading, len(body))
    cuts = _check_bounds(bounds, len(body))
    chunks = len(cuts) - 1
    if chunks <= 0:
        return []
    _check_per_chunk(match_seq_nums, chunks, "match_seq_nums")
    _check_per_chunk(first_record_headers, chunks, "first_record_headers")
    extras = [_headers_bytes(chunk) for chunk in first_record_headers] if first_record_headers else None
    trailers = _trailers(match_seq_nums, fencing_token, chunks)
    out: list[bytes] = []
    for lo, hi in _blocks(body, cuts):
        block_extras = extras[lo:hi] if extras is not None else None
        out += _encode_block(
            body,
            headers,
            timestamp,
            leading,
            cuts=cuts[lo : hi + 1],
            extras=block_extras,
            trailers=trailers[lo:hi],
        )
    return out


class EncodedRecords(NamedTuple):
    """Rows serialized as ``AppendInput.records`` fields, back to back: row ``i`` is
    ``data[offsets[i]:offsets[i + 1]]``, so rows ``a:b`` of any chunk are one contiguous slice."""

    data: Bytes
    offsets: Ints


def encode_records(
    body: pa.Array,
    headers: pa.Array | None,
    timestamp: pa.Array | None,
    leading: Sequence[LeadingHeader] = (),
) -> EncodedRecords:
    """Every row of a record frame as a serialized ``records`` field (what `encode_append_inputs`
    writes for it in any chunk but as its first record under a tag). Concatenating the fields of rows
    ``a:b`` and a `fencing_token_field` is the ``AppendInput`` of those rows. Raises as
    `encode_append_inputs`."""
    body = as_large_binary(body, BODY)
    _check_leading(leading, len(body))
    n = len(body)
    if n == 0:
        return EncodedRecords(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    # One "chunk" per `_BLOCK_ROWS` rows lets `_blocks` bound the temporaries.
    cuts = np.unique(np.append(np.arange(0, n, _BLOCK_ROWS, dtype=np.int64), n))
    datas: list[Bytes] = []
    offsets: list[Ints] = [np.zeros(1, dtype=np.int64)]
    at = 0
    for lo, hi in _blocks(body, cuts):
        block_cuts = cuts[lo : hi + 1]
        records = _records_block(
            body, headers, timestamp, leading, cuts=block_cuts, extras=None, trailers=[b""] * (hi - lo)
        )
        view = binary_view(records)
        datas.append(view.data[view.offsets[0] : view.offsets[-1]])
        offsets.append(view.offsets[1:] - view.offsets[0] + at)
        at += int(view.offsets[-1] - view.offsets[0])
    data = datas[0] if len(datas) == 1 else np.concatenate(datas)
    return EncodedRecords(data, np.concatenate(offsets))


def record_field(body: bytes, headers: Sequence[Header], timestamp: int | None) -> bytes:
    """One record as a serialized ``AppendInput.records`` field, in plain Python (for a few records,
    e.g. a chunk's tagged first record): the bytes `encode_append_inputs` writes for it."""
    record = b"" if timestamp is None else bytes([_RECORD_TIMESTAMP]) + _varint(timestamp)
    record += _headers_bytes(headers)
    if body:
        record += _field(_RECORD_BODY, body)
    return _field(_INPUT_RECORDS, record)


def _blocks(body: pa.Array, cuts: Ints) -> list[tuple[int, int]]:
    """Runs of whole chunks, ``[lo, hi)``, of at most `_BLOCK_ROWS` rows or `_BLOCK_BYTES` body bytes
    (or one chunk): working on a block at a time keeps the temporaries small and their memory reused."""
    offsets = binary_view(body).offsets if len(body) else np.zeros(1, dtype=np.int64)
    rows = np.diff(cuts).tolist()
    nbytes = np.diff(offsets[cuts]).tolist()
    blocks = []
    lo, block_rows, block_bytes = 0, 0, 0
    for i, (r, b) in enumerate(zip(rows, nbytes, strict=True)):
        if i > lo and (block_rows + r > _BLOCK_ROWS or block_bytes + b > _BLOCK_BYTES):
            blocks.append((lo, i))
            lo, block_rows, block_bytes = i, 0, 0
        block_rows += r
        block_bytes += b
    blocks.append((lo, len(rows)))
    return blocks


def _encode_block(
    body: pa.Array,
    headers: pa.Array | None,
    timestamp: pa.Array | None,
    leading: Sequence[LeadingHeader],
    *,
    cuts: Ints,
    extras: Sequence[bytes] | None,
    trailers: Sequence[bytes],
) -> list[bytes]:
    """`encode_append_inputs` for the chunks between ``cuts`` (absolute rows), with each chunk's
    serialized extra headers and trailer."""
    records = _records_block(body, headers, timestamp, leading, cuts=cuts, extras=extras, trailers=trailers)
    data = records.buffers()[2]
    ends = binary_view(records).offsets[cuts - cuts[0]].tolist()
    return [data[start:end].to_pybytes() for start, end in itertools.pairwise(ends)]


def _records_block(
    body: pa.Array,
    headers: pa.Array | None,
    timestamp: pa.Array | None,
    leading: Sequence[LeadingHeader],
    *,
    cuts: Ints,
    extras: Sequence[bytes] | None,
    trailers: Sequence[bytes],
) -> pa.Array:
    """The rows between ``cuts`` (absolute) as serialized ``records`` fields, one large_binary value per
    row, each chunk's extra headers in its first row and its trailer after its last."""
    first, stop = int(cuts[0]), int(cuts[-1])
    cuts = cuts - first
    n = stop - first
    bodies = _bodies(body, first, n)
    stamped, stamps = _timestamps(timestamp, len(body), first, n)
    lead_parts, lead_len = _leading_fields(leading, first, n)
    own_headers = _own_headers(headers, len(body), first, n)
    extra_headers = _per_row(n, cuts[:-1], extras or ())
    trailer = _per_row(n, cuts[1:] - 1, trailers)

    body_len = binary_view(bodies).lengths
    body_size = varint_sizes(body_len)
    stamp_size = varint_sizes(stamps)
    record_len = (
        np.where(stamped, 1 + stamp_size, 0)
        + lead_len
        + binary_view(own_headers).lengths
        + binary_view(extra_headers).lengths
        + np.where(body_len > 0, 1 + body_size + body_len, 0)
    )
    record_key = (None, _INPUT_RECORDS, record_len, varint_sizes(record_len))
    stamp = (stamped, _RECORD_TIMESTAMP, stamps, stamp_size)
    body_key = (body_len > 0, _RECORD_BODY, body_len, body_size)
    return _join(
        large_binary(pack_fields(n, [record_key, stamp])),
        *lead_parts,
        own_headers,
        extra_headers,
        large_binary(pack_fields(n, [body_key])),
        bodies,
        trailer,
    )


def _join(*columns: pa.Array) -> pa.Array:
    """Row ``i`` of every column, concatenated (in C++)."""
    # the separator made here, not at import: pyarrow's first scalar conversion imports pandas
    return pc.binary_join_element_wise(*columns, pa.scalar(b"", pa.large_binary()))


# ---------------------------------------------------------------------------------------------------
# Arguments and columns


def _check_bounds(bounds: npt.ArrayLike, rows: int) -> Ints:
    cuts = np.asarray(bounds)
    if cuts.ndim != 1 or (cuts.size and not np.issubdtype(cuts.dtype, np.integer)):
        raise ValueError(f"bounds must be a 1-D array of row indices, got {cuts.dtype} of shape {cuts.shape}")
    cuts = cuts.astype(np.int64)
    if cuts.size and (cuts[0] < 0 or cuts[-1] > rows):
        raise ValueError(f"bounds must lie within [0, {rows}] (the frame's rows), got {cuts[0]}..{cuts[-1]}")
    steps = np.diff(cuts)
    if steps.size and steps.min() <= 0:
        at = int(np.argmax(steps <= 0))
        raise ValueError(
            f"bounds must increase strictly (an append holds at least one record), "
            f"got bounds[{at}] = {cuts[at]} then {cuts[at + 1]}"
        )
    return cuts


def _check_per_chunk(given: Sequence[object] | None, chunks: int, what: str) -> None:
    if given is not None and len(given) != chunks:
        raise ValueError(f"{what} must have one entry per chunk ({chunks}), got {len(given)}")


def _bodies(body: pa.Array, first: int, n: int) -> pa.Array:
    column = body.slice(first, n)
    if column.null_count:
        row = first + int(np.argmin(validity(column)))
        raise EncodeError(
            f"{BODY} is null in row {row}: every record needs a body (use b'' for an empty one)"
        )
    return column


def _timestamps(
    timestamp: pa.Array | None, rows: int, first: int, n: int
) -> tuple[Bools, npt.NDArray[np.uint64]]:
    """Which rows carry a timestamp, and the timestamps (0 where unset)."""
    if timestamp is not None:
        _check_length(timestamp, rows, TIMESTAMP)
    if timestamp is None or pa.types.is_null(timestamp.type) or timestamp.null_count == len(timestamp):
        return np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.uint64)
    if not pa.types.is_integer(timestamp.type):
        raise TypeError(f"{TIMESTAMP} must be an integer column (ms since the epoch), got {timestamp.type}")
    column = timestamp.slice(first, n).cast(pa.int64())
    stamped = validity(column)
    stamps = column.fill_null(0).to_numpy()
    negative = stamped & (stamps < 0)
    if negative.any():
        at = int(np.argmax(negative))
        raise EncodeError(
            f"{TIMESTAMP} is {stamps[at]} in row {first + at}: S2 timestamps are unsigned "
            f"milliseconds since the epoch; use null to let S2 assign one"
        )
    return stamped, stamps.astype(np.uint64)


def _own_headers(headers: pa.Array | None, rows: int, first: int, n: int) -> pa.Array:
    """Every row's own ``headers`` fields, serialized, as one large_binary value per row."""
    if headers is not None:
        _check_length(headers, rows, HEADERS)
    if headers is None or pa.types.is_null(headers.type):
        return _per_row(n, np.zeros(0, dtype=np.int64), [])
    typ = headers.type
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)) or not pa.types.is_struct(typ.value_type):
        raise TypeError(f"{HEADERS} must be list<struct<name: binary, value: binary>>, got {typ}")
    fields = [typ.value_type.field(i).name for i in range(typ.value_type.num_fields)]
    if "name" not in fields or "value" not in fields:
        raise TypeError(f"{HEADERS} entries must have fields 'name' and 'value', got {typ.value_type}")
    column = headers.slice(first, n)
    count = column.value_lengths().fill_null(0).to_numpy().astype(np.int64)
    # flatten() keeps only the entries of non-null rows, from the slice's offset on; the struct's own
    # flatten() applies its offset and null bitmap to the children.
    children = column.flatten().flatten()
    name, value = children[fields.index("name")], children[fields.index("value")]
    for child, what in ((name, "name"), (value, "value")):
        if child.null_count:
            entry = int(np.argmin(validity(child)))
            row = first + int(np.searchsorted(np.cumsum(count), entry, side="right"))
            raise EncodeError(
                f"{HEADERS} has a null header {what} in row {row}: header names and values are "
                f"bytes (use b'' for an empty one)"
            )
    if len(name) == 0:
        return _per_row(n, np.zeros(0, dtype=np.int64), [])
    names = as_large_binary(name, f"{HEADERS}.name")
    values = as_large_binary(value, f"{HEADERS}.value")
    name_len, value_len = binary_view(names).lengths, binary_view(values).lengths
    name_size, value_size = varint_sizes(name_len), varint_sizes(value_len)
    header_len = np.where(name_len > 0, 1 + name_size + name_len, 0) + np.where(
        value_len > 0, 1 + value_size + value_len, 0
    )
    entries = len(names)
    header_key = (None, _RECORD_HEADERS, header_len, varint_sizes(header_len))
    name_key = (name_len > 0, _HEADER_NAME, name_len, name_size)
    value_key = (value_len > 0, _HEADER_VALUE, value_len, value_size)
    fields_bytes = _join(
        large_binary(pack_fields(entries, [header_key, name_key])),
        names,
        large_binary(pack_fields(entries, [value_key])),
        values,
    )
    # A row's header fields are consecutive entries: one value spanning them, by offsets alone.
    first_entry = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(count, out=first_entry[1:])
    offsets = binary_view(fields_bytes).offsets[first_entry]
    data = fields_bytes.buffers()[2]
    return pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), data])


def _leading_fields(leading: Sequence[LeadingHeader], first: int, n: int) -> tuple[list[pa.Array], Ints]:
    """The ``headers`` fields of rows ``first:first + n`` for the `leading` headers, as columns (and
    scalars) to join into each record in order, and their total bytes per row."""
    parts: list[pa.Array] = []
    total = np.zeros(n, dtype=np.int64)
    for name, column in leading:
        values = as_large_binary(column.slice(first, n), f"leading header {name!r}")
        if values.null_count:
            row = first + int(np.argmin(validity(values)))
            raise EncodeError(
                f"leading header {name!r} has a null value in row {row}: header values are bytes "
                "(use b'' for an empty one)"
            )
        value_len = binary_view(values).lengths
        named = _field(_HEADER_NAME, name) if name else b""  # the same bytes in every row
        prefix, prefix_len = _value_prefix(named, value_len)
        parts += [*prefix, values]
        total += prefix_len + value_len
    return parts, total


def _value_prefix(named: bytes, value_len: Ints) -> tuple[list[pa.Array | pa.Scalar], Ints]:
    """A leading header's field up to its value: ``headers`` key, length, the serialized name, and the
    value's key and length (absent for an empty value), as parts to join, and their bytes per row."""
    n = len(value_len)
    value_size = varint_sizes(value_len)
    header_len = len(named) + np.where(value_len > 0, 1 + value_size + value_len, 0)
    header_size = varint_sizes(header_len)
    prefix_len = 1 + header_size + len(named) + np.where(value_len > 0, 1 + value_size, 0)
    if n and value_len.min() == value_len.max():  # e.g. the 1-byte @action: the same bytes in every row
        # the field of any such value, cut before the value's bytes
        size = int(value_len[0])
        one = _field(_RECORD_HEADERS, named + (_field(_HEADER_VALUE, bytes(size)) if size else b""))
        return [pa.scalar(one[: len(one) - size], pa.large_binary())], prefix_len
    if n and value_len.min() > 0 and header_len.max() < 0x80:
        # 1-byte lengths (keys under ~110 bytes): fixed-width rows, written column-wise by numpy
        width = 4 + len(named)
        rows: Bytes = np.empty((n, width), dtype=np.uint8)
        rows[:] = np.frombuffer(bytes([_RECORD_HEADERS, 0, *named, _HEADER_VALUE, 0]), dtype=np.uint8)
        rows[:, 1] = header_len
        rows[:, -1] = value_len
        offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
        return [large_binary((offsets, rows.reshape(-1)))], prefix_len
    header_key = (None, _RECORD_HEADERS, header_len, header_size)
    value_key = (value_len > 0, _HEADER_VALUE, value_len, value_size)
    parts = [
        large_binary(pack_fields(n, [header_key])),
        pa.scalar(named, pa.large_binary()),
        large_binary(pack_fields(n, [value_key])),
    ]
    return parts, prefix_len


def _check_leading(leading: Sequence[LeadingHeader], rows: int) -> None:
    for name, column in leading:
        _check_length(column, rows, f"leading header {name!r}")


def _per_row(n: int, rows: Ints, values: Sequence[bytes]) -> pa.Array:
    """A large_binary column of ``n`` rows holding ``values[i]`` in row ``rows[i]`` and b"" elsewhere."""
    lengths = np.zeros(n, dtype=np.int64)
    if values:
        lengths[rows] = [len(v) for v in values]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return large_binary((offsets, np.frombuffer(b"".join(values), dtype=np.uint8)))


def _headers_bytes(headers: Sequence[Header]) -> bytes:
    """``headers`` as serialized ``AppendRecord.headers`` fields (a few per chunk: plain Python)."""
    out = bytearray()
    for name, value in headers:
        header = (_field(_HEADER_NAME, name) if name else b"") + (
            _field(_HEADER_VALUE, value) if value else b""
        )
        out += _field(_RECORD_HEADERS, header)
    return bytes(out)


def fencing_token_field(fencing_token: str | None) -> bytes:
    """``AppendInput.fencing_token`` serialized (b"" for ``None``). It is the message's last field, so a
    chunk encoded without a token plus this is the chunk encoded with it: a token change re-sends the
    same record bytes with a new trailer."""
    return b"" if fencing_token is None else _field(_INPUT_FENCING_TOKEN, fencing_token.encode())


def _trailers(
    match_seq_nums: Sequence[int | None] | None, fencing_token: str | None, chunks: int
) -> list[bytes]:
    """Each chunk's fields after its records: ``match_seq_num`` (when set), ``fencing_token`` (when set)."""
    token = fencing_token_field(fencing_token)
    if match_seq_nums is None:
        return [token] * chunks
    out = []
    for i, match in enumerate(match_seq_nums):
        if match is None:
            out.append(token)
            continue
        if not 0 <= match < _U64_LIMIT:
            raise ValueError(
                f"match_seq_nums[{i}] is {match}: a sequence number is an unsigned 64-bit integer"
            )
        out.append(bytes([_INPUT_MATCH_SEQ_NUM]) + _varint(match) + token)
    return out


def _check_length(column: pa.Array, rows: int, what: str) -> None:
    if len(column) != rows:
        raise ValueError(f"{what} has {len(column)} rows but {BODY} has {rows}")


def _field(key: int, payload: bytes) -> bytes:
    return bytes([key]) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
