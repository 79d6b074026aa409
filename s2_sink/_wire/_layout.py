"""Vectorised byte-layout primitives: protobuf varints and run copies written into one preallocated buffer.

Each function takes whole arrays of positions and values and costs a fixed number of numpy passes
(one per varint byte, or one per copied source), never one Python step per item.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["Bytes", "Ints", "put_runs", "put_varints", "varint_sizes"]

Bytes = npt.NDArray[np.uint8]
Ints = npt.NDArray[np.int64]

# Smallest value needing 2, 3, ... 10 varint bytes.
_THRESHOLDS: Final = tuple(1 << (7 * k) for k in range(1, 10))

# Bytes copied per output byte above which a run copy uses a byte mask (1 byte per output byte)
# rather than a gather index (8 bytes per copied byte).
_DENSE_RATIO: Final = 8


def varint_sizes(values: npt.NDArray[np.int64] | npt.NDArray[np.uint64]) -> Ints:
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


def put_varints(
    out: Bytes, pos: Ints, values: npt.NDArray[np.int64] | npt.NDArray[np.uint64], sizes: Ints
) -> None:
    """Write ``values[i]`` as a varint of ``sizes[i]`` bytes (from `varint_sizes`) at ``out[pos[i]:]``."""
    if len(values) == 0:
        return
    rest = values.astype(np.uint64)
    width = int(sizes.max())
    for k in range(width):
        if k:
            # Only the values still longer than k bytes carry on; the others are complete.
            going = sizes > k
            rest, pos, sizes = rest[going], pos[going], sizes[going]
        byte = (rest & 0x7F).astype(np.uint8)
        byte[sizes > k + 1] |= 0x80
        out[pos + k] = byte
        rest >>= 7


def put_runs(out: Bytes, starts: Ints, lengths: Ints, src: Bytes) -> None:
    """Copy ``src`` into ``out`` run by run: run ``i`` takes the next ``lengths[i]`` bytes of ``src`` to
    ``out[starts[i]:]``. Runs must be in increasing, non-overlapping order and ``len(src)`` their total."""
    if len(src) == 0:
        return
    if len(src) * _DENSE_RATIO >= len(out):
        # Mark each run's first byte +1 and the byte after it -1; the running sum is the run mask.
        # Adjacent runs share an edge (+1 -1 = 0), which keeps the mask set across it, as it should.
        keep = lengths > 0
        starts, lengths = starts[keep], lengths[keep]
        edges = np.zeros(len(out) + 1, dtype=np.int8)
        edges[starts] = 1
        edges[starts + lengths] -= 1
        mask = np.cumsum(edges[:-1], dtype=np.int8).view(np.bool_)
        out[mask] = src
    else:
        src_starts = np.cumsum(lengths) - lengths
        index = np.repeat(starts - src_starts, lengths) + np.arange(len(src), dtype=np.int64)
        out[index] = src
