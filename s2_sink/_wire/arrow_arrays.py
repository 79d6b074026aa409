"""Arrow arrays and numpy, both ways: arrays over numpy buffers, numpy views of binary arrays (the buffers
the wire encoder reads and writes), and Arrow's kernels called without importing pandas.

A read task runs in a fresh Python worker that has imported neither pandas nor ``pyarrow.compute``.
``pa.array`` and ``pa.scalar`` import pandas on first use (about 0.3 s of CPU) and ``Array.take`` /
``Array.cast`` import ``pyarrow.compute`` (which builds a Python wrapper per kernel), so the read path
builds its arrays from buffers and calls the kernels through ``pyarrow._compute.call_function``, the
function those wrappers call.

A binary array's view has int64 offsets absolute into its data buffer, so values ``[a, b)`` are the
contiguous bytes ``data[offsets[a]:offsets[b]]`` whatever the array's offset (a slice) or offset width.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow._compute as _pc

from s2_sink._wire.layout import Bools, Bytes, Ints, Packed

__all__ = [
    "BinaryView",
    "as_large_binary",
    "binary_view",
    "bool_array",
    "bools",
    "call",
    "cast",
    "empty_binary",
    "int32_array",
    "int64_array",
    "large_binary",
    "repeated",
    "take",
    "uint64_array",
    "valid_rows",
    "validity",
]


def int32_array(values: np.ndarray[Any, np.dtype[np.int32]] | Ints) -> pa.Array:
    """An ``int32`` array of ``values`` (list offsets, say; each must fit)."""
    data = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(data), [None, pa.py_buffer(data)])


def int64_array(values: Ints, valid: Bools | None = None) -> pa.Array:
    """An ``int64`` array over ``values`` (no copy when they are contiguous int64), null where ``valid`` is
    False."""
    data = np.ascontiguousarray(values, dtype=np.int64)
    bitmap = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(pa.int64(), len(data), [bitmap, pa.py_buffer(data)])


def uint64_array(values: np.ndarray[Any, np.dtype[np.uint64]]) -> pa.Array:
    """A ``uint64`` array over ``values``."""
    data = np.ascontiguousarray(values, dtype=np.uint64)
    return pa.Array.from_buffers(pa.uint64(), len(data), [None, pa.py_buffer(data)])


def bool_array(values: Bools) -> pa.Array:
    """A ``bool`` array of ``values`` (bit-packed, as Arrow keeps booleans)."""
    bits = np.packbits(np.asarray(values, dtype=np.bool_), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])


def repeated(value: bytes | None, count: int, type_: pa.DataType) -> pa.Array:
    """``count`` times ``value`` (None: null) as a ``string`` or ``binary`` array ``type_``."""
    if value is None:
        return pa.nulls(count, type_)
    offsets = np.arange(count + 1, dtype=np.int32) * len(value)
    return pa.Array.from_buffers(type_, count, [None, pa.py_buffer(offsets), pa.py_buffer(value * count)])


def empty_binary() -> pa.Array:
    """A ``binary`` array of no values."""
    return pa.Array.from_buffers(
        pa.binary(), 0, [None, pa.py_buffer(np.zeros(1, dtype=np.int32)), pa.py_buffer(b"")]
    )


def call(name: str, args: list[Any], options: Any = None) -> Any:
    """Arrow's compute function ``name`` on ``args``, as ``pyarrow.compute.<name>`` calls it."""
    return _pc.call_function(name, args, options)


def take(arr: pa.Array, indices: Ints) -> pa.Array:
    """``arr.take(indices)``."""
    taken: pa.Array = call("take", [arr, int64_array(indices)])
    return taken


def cast(arr: pa.Array, to: pa.DataType) -> pa.Array:
    """``arr.cast(to)`` (safe: values that do not fit raise ``ArrowInvalid``)."""
    out: pa.Array = call("cast", [arr], _pc.CastOptions.safe(to))
    return out


def bools(arr: pa.Array) -> Bools:
    """The values of a ``bool`` array (nulls as False), from its buffers."""
    bits = np.unpackbits(np.frombuffer(arr.buffers()[1], dtype=np.uint8), bitorder="little")
    values: Bools = bits[arr.offset : arr.offset + len(arr)].astype(np.bool_)
    return values & valid_rows(arr)


def valid_rows(arr: pa.Array) -> Bools:
    """True where ``arr`` holds a value, from its validity bitmap."""
    bitmap = arr.buffers()[0]
    if bitmap is None or arr.null_count == 0:
        return np.ones(len(arr), dtype=np.bool_)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    valid: Bools = bits[arr.offset : arr.offset + len(arr)].astype(np.bool_)
    return valid


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
