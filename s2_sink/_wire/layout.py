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

VarintField = tuple[Bools | None, int | bytes, Values | None, Ints | None]
"""One field of every row: (present, or ``None`` for every row; the key, a byte or several (e.g. a whole
header up to its value's length); the varint values and their `varint_sizes`, or ``None``, ``None`` for the
key bytes alone, a literal)."""

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
    """Row ``i`` holds, in order, the key bytes and the varint value (if any) of each field present in it."""
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
