"""The s2.v1 append messages' field keys, the small pieces the record and header encoders join, and the
layout of key + varint fields over numpy (one numpy pass per varint byte, never a Python step per row).

Field keys are ``(field number << 3) | wire type`` (0 = varint, 2 = length-delimited)::

    AppendInput  = { AppendRecord records = 1 (repeated); uint64 match_seq_num = 2 (optional);
                     string fencing_token = 3 (optional) }
    AppendRecord = { uint64 timestamp = 1 (optional); Header headers = 2 (repeated); bytes body = 3 }
    Header       = { bytes name = 1; bytes value = 2 }
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink._wire.columns import Bools, Bytes, Ints, Packed, large_binary
from s2_sink.encoders._frame import BODY

__all__ = [
    "HEADER_NAME",
    "HEADER_VALUE",
    "INPUT_FENCING_TOKEN",
    "INPUT_MATCH_SEQ_NUM",
    "INPUT_RECORDS",
    "RECORD_BODY",
    "RECORD_HEADERS",
    "RECORD_TIMESTAMP",
    "VarintField",
    "check_length",
    "field",
    "join",
    "no_bytes",
    "pack_fields",
    "varint",
    "varint_sizes",
]

INPUT_RECORDS: Final = 0x0A
INPUT_MATCH_SEQ_NUM: Final = 0x10
INPUT_FENCING_TOKEN: Final = 0x1A
RECORD_TIMESTAMP: Final = 0x08
RECORD_HEADERS: Final = 0x12
RECORD_BODY: Final = 0x1A
HEADER_NAME: Final = 0x0A
HEADER_VALUE: Final = 0x12

Values = npt.NDArray[np.int64] | npt.NDArray[np.uint64]

# Smallest value needing 2, 3, ... 10 varint bytes.
_THRESHOLDS: Final = tuple(1 << (7 * k) for k in range(1, 10))

VarintField = tuple[Bools | None, int | bytes, Values | None, Ints | None]
"""One field of every row: (present, None = in every row; the key, a byte or several; the varint values
and their `varint_sizes`, or None, None for the key bytes alone)."""


def join(*columns: pa.Array | pa.Scalar) -> pa.Array:
    # the separator made here, not at import: pyarrow's first scalar conversion imports pandas
    return pc.binary_join_element_wise(*columns, pa.scalar(b"", pa.large_binary()))


def no_bytes(n: int) -> pa.Array:
    return large_binary((np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint8)))


def check_length(column: pa.Array, rows: int, what: str) -> None:
    if len(column) != rows:
        raise ValueError(f"{what} has {len(column)} rows but {BODY} has {rows}")


def field(key: int, payload: bytes) -> bytes:
    return bytes([key]) + varint(len(payload)) + payload


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint_sizes(values: Values) -> Ints:
    """Values must be non-negative."""
    sizes = np.ones(len(values), dtype=np.int64)
    if len(values) == 0:
        return sizes
    top = int(values.max())
    for threshold in _THRESHOLDS:
        if top < threshold:
            break
        sizes += values >= threshold
    return sizes


def pack_fields(rows: int, fields: Sequence[VarintField]) -> Packed:
    # A field in every row or in none (a body-only frame's bodies and unset timestamps) needs no mask.
    fields = [
        (None, key, values, sizes) if present is not None and present.all() else (present, key, values, sizes)
        for present, key, values, sizes in fields
        if present is None or present.any()
    ]
    if rows == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8)
    # Written column by column into rows as wide as the longest, then the bytes past each row's own
    # fields dropped in one pass: strided column writes cost less than scattering every byte.
    heads = [
        np.frombuffer(bytes([key]) if isinstance(key, int) else key, dtype=np.uint8)
        for _, key, _, _ in fields
    ]
    widths = [
        len(h) + (0 if sizes is None else int(sizes.max()))
        for h, (_, _, _, sizes) in zip(heads, fields, strict=True)
    ]
    grid: Bytes = np.empty((rows, sum(widths)), dtype=np.uint8)
    keep: Bools | None = None  # which bytes of `grid` are the rows' own (None: all of them)
    lengths = np.zeros(rows, dtype=np.int64)
    column = 0
    for (present, _, values, sizes), head, width in zip(fields, heads, widths, strict=True):
        grid[:, column : column + len(head)] = head
        at = column + len(head)  # the varint's first byte
        row_width: Ints | int = len(head)
        if values is not None and sizes is not None:
            rest = values.astype(np.uint64)
            for k in range(width - len(head)):
                byte = (rest & 0x7F).astype(np.uint8)
                byte[sizes > k + 1] |= 0x80
                grid[:, at + k] = byte
                rest >>= 7
            row_width = len(head) + sizes
            if present is not None or int(sizes.min()) + len(head) < width:
                if keep is None:
                    keep = np.ones(grid.shape, dtype=np.bool_)
                for k in range(1, width - len(head)):  # the first varint byte is always written
                    keep[:, at + k] = sizes > k
        if present is not None:
            if keep is None:
                keep = np.ones(grid.shape, dtype=np.bool_)
            keep[:, column : column + width] &= present[:, None]
        lengths += row_width if present is None else np.where(present, row_width, 0)
        column += width
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out: Bytes = grid.reshape(-1) if keep is None else grid[keep]
    return offsets, out
