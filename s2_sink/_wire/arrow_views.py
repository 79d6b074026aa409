"""Numpy views of Arrow binary arrays and back: the buffers the wire encoder reads and writes.

Offsets come back as int64 and absolute into the data buffer, so values ``[a, b)`` are the contiguous
bytes ``data[offsets[a]:offsets[b]]`` whatever the array's offset (a slice) or offset width.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pyarrow as pa

from s2_sink._wire.layout import Bools, Bytes, Ints, Packed

__all__ = ["BinaryView", "as_large_binary", "binary_view", "large_binary", "validity"]

_EMPTY_BYTES: Bytes = np.empty(0, dtype=np.uint8)


class BinaryView(NamedTuple):
    """A binary array as (offsets into data, data): value ``i`` is ``data[offsets[i]:offsets[i + 1]]``."""

    offsets: Ints
    data: Bytes

    @property
    def lengths(self) -> Ints:
        """Byte length of every value."""
        return np.diff(self.offsets)


def binary_view(arr: pa.Array) -> BinaryView:
    """The offsets and data of a binary or large_binary array (nulls read as empty)."""
    width: type[np.int32] | type[np.int64] = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    buffers = arr.buffers()
    if buffers[1] is None:  # a zero-length array may have no offsets buffer at all
        return BinaryView(np.zeros(1, dtype=np.int64), _EMPTY_BYTES)
    offsets = np.frombuffer(buffers[1], dtype=width, count=len(arr) + 1, offset=arr.offset * width().itemsize)
    data = _EMPTY_BYTES if buffers[2] is None else np.frombuffer(buffers[2], dtype=np.uint8)
    return BinaryView(offsets.astype(np.int64), data)


def as_large_binary(arr: pa.Array, what: str) -> pa.Array:
    """``arr`` as large_binary (shares its data buffer); TypeError naming ``what`` unless it is binary."""
    typ = arr.type
    if not (pa.types.is_binary(typ) or pa.types.is_large_binary(typ)):
        raise TypeError(f"{what} must be binary or large_binary, got {typ}")
    return arr if pa.types.is_large_binary(typ) else arr.cast(pa.large_binary())


def large_binary(packed: Packed) -> pa.Array:
    """A large_binary array over packed (offsets, data), without copying either."""
    offsets, data = packed
    buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.large_binary(), len(offsets) - 1, buffers)


def validity(arr: pa.Array) -> Bools:
    """True where ``arr`` holds a value."""
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=np.bool_)
    mask: Bools = arr.is_valid().to_numpy(zero_copy_only=False)
    return mask
