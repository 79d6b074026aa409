"""Arrow arrays over numpy buffers and Arrow's kernels, called without importing pandas.

A read task runs in a fresh Python worker that has imported neither pandas nor ``pyarrow.compute``.
``pa.array`` and ``pa.scalar`` import pandas on first use (about 0.3 s of CPU) and ``Array.take`` /
``Array.cast`` import ``pyarrow.compute`` (which builds a Python wrapper per kernel), so the read path
builds its arrays from buffers and calls the kernels through ``pyarrow._compute.call_function``, the
function those wrappers call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow._compute as _pc

from s2_sink._wire._layout import Bools, Ints

__all__ = ["call", "cast", "empty_binary", "int32_array", "int64_array", "take", "uint64_array", "valid_rows"]


def int32_array(values: np.ndarray[Any, np.dtype[np.int32]]) -> pa.Array:
    """An ``int32`` array over ``values`` (list offsets, say)."""
    data = np.ascontiguousarray(values, dtype=np.int32)
    return pa.Array.from_buffers(pa.int32(), len(data), [None, pa.py_buffer(data)])


def int64_array(values: Ints) -> pa.Array:
    """An ``int64`` array over ``values`` (no copy when they are contiguous int64)."""
    data = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def uint64_array(values: np.ndarray[Any, np.dtype[np.uint64]]) -> pa.Array:
    """A ``uint64`` array over ``values``."""
    data = np.ascontiguousarray(values, dtype=np.uint64)
    return pa.Array.from_buffers(pa.uint64(), len(data), [None, pa.py_buffer(data)])


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


def valid_rows(arr: pa.Array) -> Bools:
    """True where ``arr`` holds a value, from its validity bitmap."""
    bitmap = arr.buffers()[0]
    if bitmap is None or arr.null_count == 0:
        return np.ones(len(arr), dtype=np.bool_)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    valid: Bools = bits[arr.offset : arr.offset + len(arr)].astype(np.bool_)
    return valid
