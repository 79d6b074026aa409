"""Small helpers over Arrow list arrays (slices and per-row sums without a Python loop)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["list_parts", "per_row_sum"]


def list_parts(col: pa.ListArray) -> tuple[pa.Array, pa.Array]:
    """(offsets from 0, the child values they index), honouring a sliced ``col``."""
    if len(col) == 0:  # an empty child may come without an offsets buffer
        return pa.array([0], pa.int32()), col.values.slice(0, 0)
    offsets = col.offsets
    start = offsets[0].as_py()
    end = offsets[-1].as_py()
    if start or offsets.offset:  # from_arrays refuses sliced offsets together with a null mask
        offsets = pc.subtract(offsets, start)
    return offsets, col.values.slice(start, end - start)


def per_row_sum(offsets: pa.Array, values: pa.Array) -> pa.Array:
    """For each row i, the sum of ``values[offsets[i]:offsets[i+1]]`` (int64)."""
    cumulative = pc.cumulative_sum(pc.cast(values, pa.int64()))
    padded = pa.concat_arrays([pa.array([0], pa.int64()), cumulative])
    offsets = pc.cast(offsets, pa.int64())
    n = len(offsets) - 1
    return pc.subtract(pc.take(padded, offsets.slice(1, n)), pc.take(padded, offsets.slice(0, n)))
