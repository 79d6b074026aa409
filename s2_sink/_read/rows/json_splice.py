"""Two JSON objects per record spliced into one, as text, for all records at once.

The upsert format keeps a row's key columns in the ``@key`` header and the others in the body, each a
JSON object; a typed read decodes ``{key fields, value fields}``. Splicing the texts (rather than parsing
and re-serializing) keeps numbers' digits as written. Per record, with each side stripped of ASCII
whitespace (what ``bytes.strip()`` strips) and required to be ``{...}``::

    {k...} + {v...}  ->  {k...,v...}      one side's inside empty (after stripping): {that other side}

When every value is compact (``{`` first, ``}`` last, no whitespace next to either, as JSON encoders
write), the insides are Arrow slices. Otherwise whitespace is stripped by moving span bounds, one numpy
pass per stripped byte position. The pieces are joined by Arrow's element-wise binary join.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink._wire.columns import binary_view, bool_array, empty_binary, repeated, take, valid_rows
from s2_sink._wire.layout import Bools, Bytes, Ints

__all__ = ["splice_objects"]

_SPACE: Final = np.zeros(256, dtype=np.bool_)
_SPACE[list(b" \t\n\r\x0b\x0c")] = True
_OPEN, _CLOSE = ord("{"), ord("}")


def splice_objects(keys: pa.Array, values: pa.Array) -> tuple[pa.Array, Bools]:
    """Per record, the object spliced from ``keys[i]`` and ``values[i]`` (binary arrays, nulls read as
    empty); and True for the records where a side is not a JSON object's text (their result is ``{}``)."""
    k_inner, k_bad = _inner(keys)
    v_inner, v_bad = _inner(values)
    bad = k_bad | v_bad
    if bad.any():
        blank, nothing = bool_array(bad), repeated(b"", len(bad), pa.binary())
        k_inner, v_inner = pc.if_else(blank, nothing, k_inner), pc.if_else(blank, nothing, v_inner)
    k_len = binary_view(k_inner).lengths * valid_rows(k_inner)  # nulls read as empty
    v_len = binary_view(v_inner).lengths * valid_rows(v_inner)
    n = len(bad)
    both = bool_array((k_len > 0) & (v_len > 0))
    comma = pc.if_else(both, repeated(b",", n, pa.binary()), repeated(b"", n, pa.binary()))
    inner = pc.binary_join_element_wise(k_inner, v_inner, comma)
    merged = pc.binary_join_element_wise(
        repeated(b"{", n, pa.binary()), inner, repeated(b"}", n, pa.binary()), repeated(b"", n, pa.binary())
    )
    return merged, bad


def _inner(arr: pa.Array) -> tuple[pa.Array, Bools]:
    """Per value, the text inside its braces, stripped; and True where the value, stripped, is not
    ``{...}`` (its text is then meaningless)."""
    offsets, data = binary_view(arr)
    start, stop = offsets[:-1], offsets[1:]
    if _compact(data, start, stop):
        return pc.binary_slice(arr, 1, -1), np.zeros(len(arr), dtype=np.bool_)
    start, stop = _strip(data, start, stop)
    braced = stop - start >= 2
    at = np.flatnonzero(braced)
    braced[at] = (data[start[at]] == _OPEN) & (data[stop[at] - 1] == _CLOSE)
    start, stop = _strip(data, start + 1, stop - 1)
    bad = ~braced
    if bad.any():  # an empty span where the previous one ends keeps the spans in ascending order
        previous_end = np.maximum.accumulate(np.where(bad, 0, stop))
        start[bad] = stop[bad] = previous_end[bad]
    return _spans(data, start, stop), bad


def _compact(data: Bytes, start: Ints, stop: Ints) -> bool:
    """Every value is ``{...}`` with no whitespace to strip, outside or just inside its braces (what JSON
    encoders write): the common case, settled in a few passes."""
    if not (stop - start >= 2).all():
        return False
    braced = (data[start] == _OPEN) & (data[stop - 1] == _CLOSE)
    return bool(braced.all()) and not (_SPACE[data[start + 1]] | _SPACE[data[stop - 2]]).any()


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


def _spans(data: Bytes, start: Ints, stop: Ints) -> pa.Array:
    """A binary array of the ascending, non-overlapping spans ``[start[i], stop[i])`` of ``data``."""
    n = len(start)
    if n == 0:
        return empty_binary()
    # The bounds start, stop, start, stop, ... ascend: an array whose even values are the spans (the odd
    # ones are the bytes between them), over ``data`` without a copy; `take` packs the spans.
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = start
    bounds[1::2] = stop
    buffers = [None, pa.py_buffer(bounds), pa.py_buffer(data)]
    interleaved = pa.Array.from_buffers(pa.binary(), 2 * n - 1, buffers)
    return take(interleaved, np.arange(0, 2 * n, 2, dtype=np.int64))
