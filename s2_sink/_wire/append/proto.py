"""Serialized ``AppendInput`` messages (s2.v1 protobuf) from a record frame's columns, in bulk: the exact
bytes the SDK would send (``append_input_to_proto(...).SerializeToString()``) without a Python object per
record. Fields go in field-number order; empty proto3 ``bytes`` (body, header name and value) are omitted,
``optional`` ones written whenever set (a timestamp of 0, an empty fencing token).

numpy sizes every field over whole columns and packs the small parts (keys, varints, constant headers)
into one column per run of them; Arrow's ``binary_join_element_wise`` joins those with the buffers' own
bytes in C++. Records come out back to back in one buffer, so a chunk is one slice of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from s2_sink._wire.append.fields import (
    INPUT_FENCING_TOKEN,
    INPUT_MATCH_SEQ_NUM,
    INPUT_RECORDS,
    RECORD_BODY,
    RECORD_TIMESTAMP,
    Header,
    LeadingHeader,
    Part,
    VarintField,
    check_leading,
    check_length,
    field,
    headers_bytes,
    join,
    leading_fields,
    own_headers,
    pack_fields,
    varint,
    varint_sizes,
)
from s2_sink._wire.columns import Bools, Bytes, Ints, as_large_binary, binary_view, large_binary, valid_rows
from s2_sink.encoders._frame import BODY, TIMESTAMP
from s2_sink.errors import EncodeError

__all__ = [
    "EncodedRecords",
    "LeadingHeader",
    "encode_append_inputs",
    "encode_records",
    "fencing_token_field",
    "record_field",
    "row_field",
]

_U64_LIMIT: Final = 1 << 64

# Block size: temporaries of a few hundred KiB stay in cache and in memory the allocator reuses
# (fresh pages cost more than the encoding itself on some virtual machines).
_BLOCK_ROWS: Final = 16_384


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
    """One ``AppendInput`` per chunk of rows ``bounds[i]:bounds[i + 1]`` of a record frame's columns
    (``None``: no row has one). ``first_record_headers[i]`` go after chunk ``i``'s first record's own
    headers (the exactly-once tag goes last); ``leading`` headers before every record's own.

    Raises EncodeError for a row S2 cannot take (null body, null header name or value, negative
    timestamp) and ValueError for arguments that do not fit together.
    """
    body = as_large_binary(body, BODY)  # shares the data buffer
    cuts = _check_bounds(bounds, len(body))
    chunks = len(cuts) - 1
    if chunks <= 0:
        check_leading(leading, len(body))
        return []
    _check_per_chunk(match_seq_nums, chunks, "match_seq_nums")
    _check_per_chunk(first_record_headers, chunks, "first_record_headers")
    token = fencing_token_field(fencing_token)
    # Argument errors before any row is encoded (a row's EncodeError would hide them).
    matches = (
        [b""] * chunks
        if match_seq_nums is None
        else [_match_field(c, m) for c, m in enumerate(match_seq_nums)]
    )
    # Chunks are slices of the rows encoded once; a tagged first record is written again in plain Python.
    data, offsets = encode_records(body, headers, timestamp, leading)
    ends = offsets.tolist()
    out = []
    for c, (lo, hi) in enumerate(itertools.pairwise(cuts.tolist())):
        extra = first_record_headers[c] if first_record_headers else ()
        first = row_field(lo, body, headers, timestamp, leading, extra=extra) if extra else b""
        out.append(b"".join((first, data[ends[lo + 1 if extra else lo] : ends[hi]].data, matches[c], token)))
    return out


def row_field(
    row: int,
    body: pa.Array,
    headers: pa.Array | None,
    timestamp: pa.Array | None,
    leading: Sequence[LeadingHeader],
    *,
    extra: Sequence[Header],
) -> bytes:
    """Row `row` of a frame's columns as a `record_field`, its headers ending with `extra` (e.g. a chunk tag);
    the rows were checked when encoded."""
    own = [] if headers is None else headers[row].as_py() or []
    ordered = [(name, column[row].as_py()) for name, column in leading]
    ordered += [(h["name"], h["value"]) for h in own] + list(extra)
    stamp = None if timestamp is None else timestamp[row].as_py()
    return record_field(body[row].as_py(), ordered, stamp)


class EncodedRecords(NamedTuple):
    """Rows as ``AppendInput.records`` fields, back to back: rows ``a:b`` are one contiguous slice."""

    data: Bytes
    offsets: Ints


def encode_records(
    body: pa.Array,
    headers: pa.Array | None,
    timestamp: pa.Array | None,
    leading: Sequence[LeadingHeader] = (),
) -> EncodedRecords:
    """Every row as a ``records`` field: rows ``a:b`` plus a `fencing_token_field` are an ``AppendInput``."""
    body = as_large_binary(body, BODY)
    check_leading(leading, len(body))
    n = len(body)
    if n == 0:
        return EncodedRecords(np.zeros(0, dtype=np.uint8), np.zeros(1, dtype=np.int64))
    datas: list[Bytes] = []
    offsets: list[Ints] = [np.zeros(1, dtype=np.int64)]
    at = 0
    for first in range(0, n, _BLOCK_ROWS):
        records = _records_block(body, headers, timestamp, leading, range(first, min(n, first + _BLOCK_ROWS)))
        view = binary_view(records)
        datas.append(view.data[view.offsets[0] : view.offsets[-1]])
        offsets.append(view.offsets[1:] - view.offsets[0] + at)
        at += int(view.offsets[-1] - view.offsets[0])
    data = datas[0] if len(datas) == 1 else np.concatenate(datas)
    return EncodedRecords(data, np.concatenate(offsets))


def record_field(body: bytes, headers: Sequence[Header], timestamp: int | None) -> bytes:
    """One record as a ``records`` field, in plain Python (a chunk's tagged first record)."""
    record = b"" if timestamp is None else bytes([RECORD_TIMESTAMP]) + varint(timestamp)
    record += headers_bytes(headers)
    if body:
        record += field(RECORD_BODY, body)
    return field(INPUT_RECORDS, record)


def _records_block(
    body: pa.Array,
    headers: pa.Array | None,
    timestamp: pa.Array | None,
    leading: Sequence[LeadingHeader],
    rows: range,
) -> pa.Array:
    first, n = rows.start, len(rows)
    bodies = _bodies(body, first, n)
    stamped, stamps = _timestamps(timestamp, len(body), first, n)
    lead_parts, lead_len = leading_fields(leading, first, n)
    own = own_headers(headers, len(body), first, n)

    body_len = binary_view(bodies).lengths
    body_size = varint_sizes(body_len)
    stamp_size = varint_sizes(stamps)
    record_len = (
        np.where(stamped, 1 + stamp_size, 0)
        + lead_len
        + binary_view(own).lengths
        + np.where(body_len > 0, 1 + body_size + body_len, 0)
    )
    record_key = (None, INPUT_RECORDS, record_len, varint_sizes(record_len))
    stamp = (stamped, RECORD_TIMESTAMP, stamps, stamp_size)
    body_key = (body_len > 0, RECORD_BODY, body_len, body_size)
    # Arrow's join costs per column about as much whether it is empty or full: empty columns are left
    # out, and the small fields between columns of bytes packed into one column per run.
    own_parts = [] if _empty(own) else [own]
    return join(*_packed_runs(n, [[record_key, stamp], *lead_parts, *own_parts, [body_key], bodies]))


def _packed_runs(n: int, parts: list[Part]) -> list[pa.Array]:
    out: list[pa.Array] = []
    run: list[VarintField] = []
    for part in parts:
        if isinstance(part, list):
            run += part
            continue
        if run:
            out.append(large_binary(pack_fields(n, run)))
            run = []
        out.append(part)
    if run:
        out.append(large_binary(pack_fields(n, run)))
    return out


def _empty(part: pa.Array) -> bool:
    offsets = binary_view(part).offsets
    return bool(offsets[-1] == offsets[0])


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
        row = first + int(np.argmin(valid_rows(column)))
        raise EncodeError(
            f"{BODY} is null in row {row}: every record needs a body (use b'' for an empty one)"
        )
    return column


def _timestamps(
    timestamp: pa.Array | None, rows: int, first: int, n: int
) -> tuple[Bools, npt.NDArray[np.uint64]]:
    """Which rows carry a timestamp, and the timestamps (0 where unset)."""
    if timestamp is not None:
        check_length(timestamp, rows, TIMESTAMP)
    if timestamp is None or pa.types.is_null(timestamp.type) or timestamp.null_count == len(timestamp):
        return np.zeros(n, dtype=np.bool_), np.zeros(n, dtype=np.uint64)
    if not pa.types.is_integer(timestamp.type):
        raise TypeError(f"{TIMESTAMP} must be an integer column (ms since the epoch), got {timestamp.type}")
    column = timestamp.slice(first, n).cast(pa.int64())
    stamped = valid_rows(column)
    stamps = column.fill_null(0).to_numpy()
    negative = stamped & (stamps < 0)
    if negative.any():
        at = int(np.argmax(negative))
        raise EncodeError(
            f"{TIMESTAMP} is {stamps[at]} in row {first + at}: S2 timestamps are unsigned "
            f"milliseconds since the epoch; use null to let S2 assign one"
        )
    return stamped, stamps.astype(np.uint64)


def fencing_token_field(fencing_token: str | None) -> bytes:
    """``AppendInput.fencing_token`` (b"" for ``None``): the message's last field, so a token change
    re-sends the same record bytes with a new trailer."""
    return b"" if fencing_token is None else field(INPUT_FENCING_TOKEN, fencing_token.encode())


def _match_field(chunk: int, match: int | None) -> bytes:
    if match is None:
        return b""
    if not 0 <= match < _U64_LIMIT:
        raise ValueError(
            f"match_seq_nums[{chunk}] is {match}: a sequence number is an unsigned 64-bit integer"
        )
    return bytes([INPUT_MATCH_SEQ_NUM]) + varint(match)
