"""Vectorised protobuf field layout: varint sizes, and key + varint fields packed row by row, over numpy.

Each function takes whole arrays and costs a fixed number of numpy passes (one per varint byte of each
field), never one Python step per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["Bools", "Bytes", "Ints", "Packed", "VarintField", "pack_fields", "varint_sizes"]

Bools = npt.NDArray[np.bool_]
Bytes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]
Values = npt.NDArray[np.int64] | npt.NDArray[np.uint64]

# Smallest value needing 2, 3, ... 10 varint bytes.
_THRESHOLDS: Final = tuple(1 << (7 * k) for k in range(1, 10))

VarintField = tuple[Bools | None, int, Values, Ints]
"""One varint field of every row: (present, or ``None`` for every row; the field key byte; the values;
their `varint_sizes`)."""

Packed = tuple[Ints, Bytes]
"""Variable-length rows as (offsets, data): row ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""


def varint_sizes(values: Values) -> Ints:
    """Bytes of each value's base-128 varint (1 to 10); values must be non-negative."""
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
    """Row ``i`` holds, in order, the key byte and varint value of each field present in row ``i``."""
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
    widths = [1 + int(sizes.max()) for _, _, _, sizes in fields]
    grid: Bytes = np.empty((rows, sum(widths)), dtype=np.uint8)
    keep: Bools | None = None  # which bytes of `grid` are the rows' own (None: all of them)
    lengths = np.zeros(rows, dtype=np.int64)
    column = 0
    for (present, key, values, sizes), width in zip(fields, widths, strict=True):
        grid[:, column] = key
        rest = values.astype(np.uint64)
        for k in range(1, width):
            byte = (rest & 0x7F).astype(np.uint8)
            byte[sizes > k] |= 0x80
            grid[:, column + k] = byte
            rest >>= 7
        if present is not None or int(sizes.min()) + 1 < width:
            if keep is None:
                keep = np.ones(grid.shape, dtype=np.bool_)
            for k in range(2, width):  # the first varint byte is always written
                keep[:, column + k] = sizes >= k
            if present is not None:
                keep[:, column : column + width] &= present[:, None]
        lengths += 1 + sizes if present is None else np.where(present, 1 + sizes, 0)
        column += width
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    out: Bytes = grid.reshape(-1) if keep is None else grid[keep]
    return offsets, out
