"""Serialized ``AppendInput`` messages (s2.v1 protobuf), one per chunk of a record frame, built in bulk.

The record frame's columns (see `s2_sink.encoders._frame`) become the exact bytes the SDK would send
for the same records (``s2_sdk._mappers.append_input_to_proto(...).SerializeToString()``), without a
Python object per record: every field's size is computed with numpy over whole columns, each record's
position follows from prefix sums, and tags, varints and the Arrow buffers' bytes are written into one
preallocated buffer. The messages::

    AppendInput  = { AppendRecord records = 1 (repeated); uint64 match_seq_num = 2 (optional);
                     string fencing_token = 3 (optional) }
    AppendRecord = { uint64 timestamp = 1 (optional); Header headers = 2 (repeated); bytes body = 3 }
    Header       = { bytes name = 1; bytes value = 2 }

Fields are written in field-number order, as protobuf serializers do; proto3 ``bytes`` fields without
presence (body, header name and value) are omitted when empty, ``optional`` ones are written whenever
set (a timestamp of 0, an empty fencing token).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from s2_sink._wire._arrow_views import BinaryView, binary_view, validity
from s2_sink._wire._layout import Bytes, Ints, put_runs, put_varints, varint_sizes
from s2_sink.encoders._frame import BODY, HEADERS, TIMESTAMP
from s2_sink.errors import EncodeError

__all__ = ["encode_append_inputs"]

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

Header = tuple[bytes, bytes]


def encode_append_inputs(
    body: pa.Array,
    headers: pa.Array | None,
    timestamp: pa.Array | None,
    bounds: npt.ArrayLike,
    *,
    fencing_token: str | None,
    match_seq_nums: Sequence[int | None] | None = None,
    first_record_headers: Sequence[Sequence[Header]] | None = None,
) -> list[bytes]:
    """One serialized ``AppendInput`` per chunk; chunk ``i`` holds rows ``bounds[i]:bounds[i + 1]``.

    ``body`` is the frame's ``_s2_body`` (binary or large_binary, no nulls), ``headers`` its
    ``_s2_headers`` (``list<struct<name: binary, value: binary>>``, a null row = no headers) and
    ``timestamp`` its ``_s2_timestamp`` (int64 ms, a null row = unset); ``None`` for a column = no row
    has one. ``bounds`` must increase strictly (an append holds at least one record) within
    ``[0, len(body)]``. Every chunk carries ``fencing_token`` (when not ``None``) and
    ``match_seq_nums[i]`` (when given and not ``None``). ``first_record_headers[i]`` is appended after
    the own headers of chunk ``i``'s first record (the exactly-once chunk tag goes last, see
    `s2_sink._exactly_once._tags`).

    Raises EncodeError for a row S2 cannot take (null body, null header name or value, negative
    timestamp) and ValueError for arguments that do not fit together.
    """
    cuts = _check_bounds(bounds, len(body))
    chunks = len(cuts) - 1
    if chunks <= 0:
        return []
    _check_per_chunk(match_seq_nums, chunks, "match_seq_nums")
    _check_per_chunk(first_record_headers, chunks, "first_record_headers")
    first, stop = int(cuts[0]), int(cuts[-1])
    cuts = cuts - first
    n = stop - first

    bodies = _bodies(body.slice(first, n), first)
    stamped, stamps = _timestamps(timestamp, len(body), first, n)
    own_count, names, values = _headers(headers, len(body), first, n)
    extra_count, extra_pairs = _extras(first_record_headers, cuts, n)

    # Header entries of every record, own ones first, then (first records only) the extra ones.
    count = own_count + extra_count
    entry_first = np.cumsum(count) - count
    entry_record = np.repeat(np.arange(n, dtype=np.int64), count)
    own_first = np.cumsum(own_count) - own_count
    own_slot = entry_first[np.repeat(np.arange(n, dtype=np.int64), own_count)] + (
        np.arange(len(names.offsets) - 1, dtype=np.int64) - np.repeat(own_first, own_count)
    )
    extra_slot = np.repeat(entry_first + own_count, extra_count) + _ranks(extra_count)
    name_len = np.empty(len(entry_record), dtype=np.int64)
    value_len = np.empty(len(entry_record), dtype=np.int64)
    name_len[own_slot] = names.lengths
    value_len[own_slot] = values.lengths
    name_len[extra_slot] = [len(name) for name, _ in extra_pairs]
    value_len[extra_slot] = [len(value) for _, value in extra_pairs]

    # Sizes, innermost first: header fields, headers, records, chunks.
    name_size, value_size = varint_sizes(name_len), varint_sizes(value_len)
    name_field = np.where(name_len > 0, 1 + name_size + name_len, 0)
    value_field = np.where(value_len > 0, 1 + value_size + value_len, 0)
    header_len = name_field + value_field
    header_size = varint_sizes(header_len)
    header_field = 1 + header_size + header_len
    header_end = np.concatenate(([0], np.cumsum(header_field)))
    headers_len = header_end[entry_first + count] - header_end[entry_first]

    stamp_size = varint_sizes(stamps)
    stamp_field = np.where(stamped, 1 + stamp_size, 0)
    body_len = bodies.lengths
    body_size = varint_sizes(body_len)
    body_field = np.where(body_len > 0, 1 + body_size + body_len, 0)
    record_len = stamp_field + headers_len + body_field
    record_size = varint_sizes(record_len)
    record_end = np.concatenate(([0], np.cumsum(1 + record_size + record_len)))

    token = b"" if fencing_token is None else fencing_token.encode()
    token_field = 0 if fencing_token is None else 1 + _varint_len(len(token)) + len(token)
    matched, match_values = _matches(match_seq_nums, chunks)
    match_size = varint_sizes(match_values)
    records_len = record_end[cuts[1:]] - record_end[cuts[:-1]]
    input_len = records_len + np.where(matched, 1 + match_size, 0) + token_field
    input_end = np.cumsum(input_len)
    input_start = input_end - input_len

    # Positions, outermost first, then the bytes.
    out: Bytes = np.empty(int(input_end[-1]), dtype=np.uint8)
    chunk_of = np.repeat(np.arange(chunks, dtype=np.int64), np.diff(cuts))
    record_at = input_start[chunk_of] + record_end[:-1] - record_end[cuts[:-1]][chunk_of]
    out[record_at] = _INPUT_RECORDS
    put_varints(out, record_at + 1, record_len, record_size)
    stamp_at = record_at + 1 + record_size
    _put_optional(out, stamp_at, stamped, key=_RECORD_TIMESTAMP, values=stamps, sizes=stamp_size)

    headers_at = stamp_at + stamp_field
    header_at = headers_at[entry_record] + header_end[:-1] - header_end[entry_first][entry_record]
    out[header_at] = _RECORD_HEADERS
    put_varints(out, header_at + 1, header_len, header_size)
    name_at = header_at + 1 + header_size
    _put_optional(out, name_at, name_len > 0, key=_HEADER_NAME, values=name_len, sizes=name_size)
    value_at = name_at + name_field
    _put_optional(out, value_at, value_len > 0, key=_HEADER_VALUE, values=value_len, sizes=value_size)
    name_data_at = name_at + 1 + name_size
    value_data_at = value_at + 1 + value_size
    put_runs(out, name_data_at[own_slot], names.lengths, names.joined)
    put_runs(out, value_data_at[own_slot], values.lengths, values.joined)
    for slot, (name, value) in zip(extra_slot.tolist(), extra_pairs, strict=True):
        out[name_data_at[slot] : name_data_at[slot] + len(name)] = np.frombuffer(name, dtype=np.uint8)
        out[value_data_at[slot] : value_data_at[slot] + len(value)] = np.frombuffer(value, dtype=np.uint8)

    body_at = headers_at + headers_len
    _put_optional(out, body_at, body_len > 0, key=_RECORD_BODY, values=body_len, sizes=body_size)
    put_runs(out, body_at + 1 + body_size, body_len, bodies.joined)

    match_at = input_start + records_len
    _put_optional(out, match_at, matched, key=_INPUT_MATCH_SEQ_NUM, values=match_values, sizes=match_size)
    if fencing_token is not None:
        token_at = match_at + np.where(matched, 1 + match_size, 0)
        out[token_at] = _INPUT_FENCING_TOKEN
        token_len = np.full(chunks, len(token), dtype=np.int64)
        put_varints(out, token_at + 1, token_len, varint_sizes(token_len))
        token_bytes = np.tile(np.frombuffer(token, dtype=np.uint8), chunks)
        put_runs(out, token_at + 1 + _varint_len(len(token)), token_len, token_bytes)

    ends = input_end.tolist()
    return [out[start:end].tobytes() for start, end in zip([0, *ends[:-1]], ends, strict=True)]


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


def _matches(
    match_seq_nums: Sequence[int | None] | None, chunks: int
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint64]]:
    """Which chunks carry a ``match_seq_num``, and the values (0 where unset)."""
    if match_seq_nums is None:
        return np.zeros(chunks, dtype=np.bool_), np.zeros(chunks, dtype=np.uint64)
    for i, m in enumerate(match_seq_nums):
        if m is not None and not 0 <= m < _U64_LIMIT:
            raise ValueError(f"match_seq_nums[{i}] is {m}: a sequence number is an unsigned 64-bit integer")
    matched = np.array([m is not None for m in match_seq_nums], dtype=np.bool_)
    values = np.array([m or 0 for m in match_seq_nums], dtype=np.uint64)
    return matched, values


def _bodies(body: pa.Array, first: int) -> BinaryView:
    if body.null_count:
        row = first + int(np.argmin(validity(body)))
        raise EncodeError(
            f"{BODY} is null in row {row}: every record needs a body (use b'' for an empty one)"
        )
    return binary_view(body, BODY)


def _timestamps(
    timestamp: pa.Array | None, rows: int, first: int, n: int
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.uint64]]:
    """Which rows carry a timestamp, and the timestamps (0 where unset)."""
    if timestamp is None or pa.types.is_null(timestamp.type) or timestamp.null_count == len(timestamp):
        return np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.uint64)
    _check_length(timestamp, rows, TIMESTAMP)
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


def _headers(headers: pa.Array | None, rows: int, first: int, n: int) -> tuple[Ints, BinaryView, BinaryView]:
    """Header count of every row, then the names and values of all their headers, in row order."""
    empty = BinaryView(np.zeros(1, dtype=np.int64), np.empty(0, dtype=np.uint8))
    if headers is None or pa.types.is_null(headers.type):
        return np.zeros(n, dtype=np.int64), empty, empty
    _check_length(headers, rows, HEADERS)
    typ = headers.type
    if not (pa.types.is_list(typ) or pa.types.is_large_list(typ)) or not pa.types.is_struct(typ.value_type):
        raise TypeError(f"{HEADERS} must be list<struct<name: binary, value: binary>>, got {typ}")
    fields = [typ.value_type.field(i).name for i in range(typ.value_type.num_fields)]
    if "name" not in fields or "value" not in fields:
        raise TypeError(f"{HEADERS} entries must have fields 'name' and 'value', got {typ.value_type}")
    column = headers.slice(first, n)
    # flatten() keeps only the entries of non-null rows, from the slice's offset on; the struct's own
    # flatten() applies its offset and null bitmap to the children.
    entries = column.flatten()
    children = entries.flatten()
    name = children[fields.index("name")]
    value = children[fields.index("value")]
    count = column.value_lengths().fill_null(0).to_numpy().astype(np.int64)
    for child, what in ((name, "name"), (value, "value")):
        if child.null_count:
            entry = int(np.argmin(validity(child)))
            row = first + int(np.searchsorted(np.cumsum(count), entry, side="right"))
            raise EncodeError(
                f"{HEADERS} has a null header {what} in row {row}: header names and values are "
                f"bytes (use b'' for an empty one)"
            )
    return count, binary_view(name, f"{HEADERS}.name"), binary_view(value, f"{HEADERS}.value")


def _extras(extras: Sequence[Sequence[Header]] | None, cuts: Ints, n: int) -> tuple[Ints, list[Header]]:
    """Extra header count of every row (non-zero only on chunks' first rows), and the headers in order."""
    count = np.zeros(n, dtype=np.int64)
    if extras is None:
        return count, []
    count[cuts[:-1]] = [len(chunk) for chunk in extras]
    return count, [(bytes(name), bytes(value)) for chunk in extras for name, value in chunk]


def _check_length(column: pa.Array, rows: int, what: str) -> None:
    if len(column) != rows:
        raise ValueError(f"{what} has {len(column)} rows but {BODY} has {rows}")


# ---------------------------------------------------------------------------------------------------
# Small helpers


def _put_optional(
    out: Bytes,
    at: Ints,
    present: npt.NDArray[np.bool_],
    *,
    key: int,
    values: npt.NDArray[np.int64] | npt.NDArray[np.uint64],
    sizes: Ints,
) -> None:
    """Write ``key`` then ``values[i]`` as a varint at ``at[i]``, where ``present[i]``."""
    if not present.any():
        return
    if not present.all():
        at, values, sizes = at[present], values[present], sizes[present]
    out[at] = key
    put_varints(out, at + 1, values, sizes)


def _ranks(count: Ints) -> Ints:
    """0, 1, ... count[i] - 1 for every i, back to back."""
    total = int(count.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(count) - count, count)


def _varint_len(value: int) -> int:
    return max(1, (value.bit_length() + 6) // 7)
