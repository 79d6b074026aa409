"""Binary columns → base64 text (what Jackson writes for ``byte[]``), whole columns at a time.

Each value is moved to the start of a slot rounded up to whole 3-byte groups (the slack zeroed), the whole
buffer is encoded in one C call, and the characters that encode slack become ``=``: the same text as
encoding each value on its own, with no value passing through Python.
"""

from __future__ import annotations

import binascii

import numpy as np
import pyarrow as pa

__all__ = ["base64_text"]


def base64_text(arr: pa.Array) -> pa.Array:
    """Standard padded base64 of every value of a binary array (null rows: an empty string)."""
    n = len(arr)
    if not pa.types.is_binary(arr.type):
        arr = arr.cast(pa.binary())
    if n == 0 or arr.buffers()[2] is None:
        return pa.repeat(pa.scalar(""), n)
    offsets = np.frombuffer(arr.buffers()[1], np.int32, n + 1, arr.offset * 4).astype(np.int64)
    lengths = np.diff(offsets)
    if arr.null_count:  # a null row's extent need not be empty
        lengths[~arr.is_valid().to_numpy(zero_copy_only=False)] = 0
    groups = (lengths + 2) // 3
    slots = np.concatenate([[0], np.cumsum(groups * 3)])
    # byte j of row r moves from offsets[r] + j to slots[r] + j
    row = np.repeat(np.arange(n), lengths)
    within = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    padded = np.zeros(int(slots[-1]), np.uint8)
    padded[slots[row] + within] = np.frombuffer(arr.buffers()[2], np.uint8)[offsets[row] + within]
    encoded = np.frombuffer(binascii.b2a_base64(padded.tobytes(), newline=False), np.uint8).copy()
    out_offsets = slots // 3 * 4
    ends = out_offsets[1:]
    slack = groups * 3 - lengths  # 0, 1 or 2 bytes: as many trailing "="
    encoded[ends[slack >= 1] - 1] = ord("=")
    encoded[ends[slack == 2] - 2] = ord("=")
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(out_offsets.astype(np.int32)), pa.py_buffer(encoded)]
    )
