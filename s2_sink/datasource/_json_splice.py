"""Two JSON objects per record spliced into one, as text, for all records at once.

The upsert format keeps a row's key columns in the ``@key`` header and the others in the body, each a
JSON object; a typed read decodes ``{key fields, value fields}``. Splicing the texts (rather than parsing
and re-serializing) keeps numbers' digits as written. Per record, with each side stripped of ASCII
whitespace (what ``bytes.strip()`` strips) and required to be ``{...}``::

    {k...} + {v...}  ->  {k...,v...}      one side's inside empty (after stripping): {that other side}

Whitespace is stripped by moving span bounds, one numpy pass per stripped byte position (compact JSON
has none, so the passes stop at once); the pieces are joined by Arrow's element-wise binary join.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink._wire._arrow_views import binary_view
from s2_sink._wire._layout import Bools, Bytes, Ints

__all__ = ["splice_objects"]

_SPACE: Final = np.zeros(256, dtype=np.bool_)
_SPACE[list(b" \t\n\r\x0b\x0c")] = True
_OPEN, _CLOSE = ord("{"), ord("}")


def splice_objects(keys: pa.Array, values: pa.Array) -> tuple[pa.Array, Bools]:
    """Per record, the object spliced from ``keys[i]`` and ``values[i]`` (binary arrays, nulls read as
    empty); and True for the records where a side is not a JSON object's text (their result is ``{}``)."""
    k_data, k_start, k_stop = _inside(keys)
    v_data, v_start, v_stop = _inside(values)
    bad = (k_start < 0) | (v_start < 0)
    k_start, k_stop = _emptied(bad, k_start, k_stop)
    v_start, v_stop = _emptied(bad, v_start, v_stop)
    k_inner, v_inner = _spans(k_data, k_start, k_stop), _spans(v_data, v_start, v_stop)
    both = (k_stop > k_start) & (v_stop > v_start)
    comma = pc.if_else(pa.array(both), pa.scalar(b",", pa.binary()), pa.scalar(b"", pa.binary()))
    inner = pc.binary_join_element_wise(k_inner, v_inner, comma)
    merged = pc.binary_join_element_wise(
        pa.scalar(b"{", pa.binary()), inner, pa.scalar(b"}", pa.binary()), pa.scalar(b"", pa.binary())
    )
    return merged, bad


def _inside(arr: pa.Array) -> tuple[Bytes, Ints, Ints]:
    """The data of ``arr`` and, per value, the span inside its braces, stripped; start -1 where the
    value, stripped, is not ``{...}``."""
    offsets, data = binary_view(arr)
    start, stop = _strip(data, offsets[:-1], offsets[1:])
    braced = stop - start >= 2
    at = np.flatnonzero(braced)
    braced[at] = (data[start[at]] == _OPEN) & (data[stop[at] - 1] == _CLOSE)
    start, stop = _strip(data, start + 1, stop - 1)
    start[~braced] = -1
    return data, start, stop


def _strip(data: Bytes, start: Ints, stop: Ints) -> tuple[Ints, Ints]:
    """The spans ``[start, stop)`` of ``data`` without leading and trailing ASCII whitespace."""
    start, stop = start.copy(), stop.copy()
    going = np.flatnonzero(start < stop)
    while going.size:
        going = going[_SPACE[data[start[going]]]]
        start[going] += 1
        going = going[start[going] < stop[going]]
    going = np.flatnonzero(start < stop)
    while going.size:
        going = going[_SPACE[data[stop[going] - 1]]]
        stop[going] -= 1
        going = going[start[going] < stop[going]]
    return start, stop


def _emptied(bad: Bools, start: Ints, stop: Ints) -> tuple[Ints, Ints]:
    """The spans, empty where ``bad`` (at the previous span's end, so they stay in ascending order)."""
    if not bad.any():
        return start, stop
    start, stop = start.copy(), stop.copy()
    previous_end = np.maximum.accumulate(np.where(bad, 0, stop))
    start[bad] = stop[bad] = previous_end[bad]
    return start, stop


def _spans(data: Bytes, start: Ints, stop: Ints) -> pa.Array:
    """A binary array of the ascending, non-overlapping spans ``[start[i], stop[i])`` of ``data``."""
    n = len(start)
    if n == 0:
        return pa.array([], type=pa.binary())
    # The bounds start, stop, start, stop, ... ascend: an array whose even values are the spans (the odd
    # ones are the bytes between them), over ``data`` without a copy; `take` packs the spans.
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = start
    bounds[1::2] = stop
    buffers = [None, pa.py_buffer(bounds), pa.py_buffer(data)]
    interleaved = pa.Array.from_buffers(pa.binary(), 2 * n - 1, buffers)
    return interleaved.take(pa.array(np.arange(0, 2 * n, 2, dtype=np.int64)))
