"""Vectorised protobuf field layout: varint sizes, and key + varint fields packed row by row, over numpy.

Each function takes whole arrays and costs a fixed number of numpy passes (one per varint byte or
per field), never one Python step per row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["Bools", "Bytes", "Ints", "Packed", "VarintField", "pack_fields", "put_varints", "varint_sizes"]

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


def put_varints(out: Bytes, pos: Ints, values: Values, sizes: Ints) -> None:
    """Write ``values[i]`` as a varint of ``sizes[i]`` bytes (from `varint_sizes`) at ``out[pos[i]:]``."""
    if len(values) == 0:
        return
    rest = values.astype(np.uint64)
    width = int(sizes.max())
    for k in range(width):
        if k:
            # Only the values still longer than k bytes carry on; the others are complete.
            going = sizes > k
            if not going.all():
                rest, pos, sizes = rest[going], pos[going], sizes[going]
        byte = (rest & 0x7F).astype(np.uint8)
        byte[sizes > k + 1] |= 0x80
        out[pos + k] = byte
        rest >>= 7


def pack_fields(rows: int, fields: Sequence[VarintField]) -> Packed:
    """Row ``i`` holds, in order, the key byte and varint value of each field present in row ``i``."""
    # A field in every row or in none (a body-only frame's bodies and unset timestamps) needs no mask.
    fields = [
        (None, key, values, sizes) if present is not None and present.all() else (present, key, values, sizes)
        for present, key, values, sizes in fields
        if present is None or present.any()
    ]
    lengths = [
        1 + sizes if present is None else np.where(present, 1 + sizes, 0) for present, _, _, sizes in fields
    ]
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(sum(lengths, np.zeros(rows, dtype=np.int64)), out=offsets[1:])
    out: Bytes = np.empty(int(offsets[-1]), dtype=np.uint8)
    at = offsets[:-1].copy()
    for (present, key, values, sizes), length in zip(fields, lengths, strict=True):
        pos = at if present is None else at[present]
        out[pos] = key
        if present is None:
            put_varints(out, pos + 1, values, sizes)
        else:
            put_varints(out, pos + 1, values[present], sizes[present])
        at += length
    return offsets, out
