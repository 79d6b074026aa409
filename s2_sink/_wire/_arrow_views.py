"""Numpy views of the Arrow buffers the wire encoder reads, sliced arrays (non-zero offset) included.

Offsets come back as int64 and absolute into the data buffer, so a run of values ``[a, b)`` is the
contiguous bytes ``data[offsets[a]:offsets[b]]`` whatever the array's offset or offset width.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from s2_sink._wire._layout import Bytes, Ints

__all__ = ["BinaryView", "binary_view", "validity"]

_EMPTY_BYTES: Bytes = np.empty(0, dtype=np.uint8)


class BinaryView(NamedTuple):
    """A binary array as (offsets into data, data): value ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    offsets: Ints
    data: Bytes

    @property
    def lengths(self) -> Ints:
        """Byte length of every value."""
        return np.diff(self.offsets)

    @property
    def joined(self) -> Bytes:
        """All values' bytes, back to back (a view, no copy)."""
        return self.data[self.offsets[0] : self.offsets[-1]]


def binary_view(arr: pa.Array, what: str) -> BinaryView:
    """The offsets and data of a binary, large_binary, string or large_string array (nulls read as empty).

    Raises TypeError naming ``what`` for any other type.
    """
    typ = arr.type
    if pa.types.is_binary(typ) or pa.types.is_string(typ):
        width: type[np.int32] | type[np.int64] = np.int32
    elif pa.types.is_large_binary(typ) or pa.types.is_large_string(typ):
        width = np.int64
    else:
        raise TypeError(f"{what} must be binary or large_binary, got {typ}")
    n = len(arr)
    buffers = arr.buffers()
    if buffers[1] is None:  # a zero-length array may have no offsets buffer at all
        return BinaryView(np.zeros(1, dtype=np.int64), _EMPTY_BYTES)
    offsets = np.frombuffer(buffers[1], dtype=width, count=n + 1, offset=arr.offset * width().itemsize)
    data = _EMPTY_BYTES if buffers[2] is None else np.frombuffer(buffers[2], dtype=np.uint8)
    return BinaryView(offsets.astype(np.int64), data)


def validity(arr: pa.Array) -> np.ndarray[tuple[int], np.dtype[np.bool_]]:
    """True where ``arr`` holds a value."""
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=np.bool_)
    mask: np.ndarray[tuple[int], np.dtype[np.bool_]] = arr.is_valid().to_numpy(zero_copy_only=False)
    return mask
