"""The upsert changelog headers, ``@key`` and ``@action``, and the record frame's flat form of them.

Every upsert record's headers begin with ``(@key, key JSON)`` and ``(@action, u | d)``. The frame carries
them either in ``_s2_headers``, as the first two entries of each row's list (what ``encode_arrow``
returns), or flat, as ``_s2_key`` (the key JSON, which the frame holds anyway) and ``_s2_action`` beside
the row's own headers (what the writers encode): no list of structs is built per row, and the wire encoder
writes both headers straight from the two columns. `with_changelog_headers` turns a flat batch back into
the list form, for the paths that take records one by one (bad rows, routing, a recovering task).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink.encoders._frame import ACTION, HEADERS, HEADERS_ARROW_TYPE, KEY, prepend_headers
from s2_sink.encoders._metered import HEADER_OVERHEAD

__all__ = [
    "ACTION_HEADER",
    "KEY_HEADER",
    "changelog_headers",
    "changelog_metered",
    "leading_headers",
    "with_changelog_headers",
]

KEY_HEADER: Final = b"@key"
ACTION_HEADER: Final = b"@action"


def leading_headers(batch: pa.RecordBatch) -> list[tuple[bytes, pa.Array]]:
    """A flat batch's changelog headers as (name, value column) pairs, in record order; none for a
    batch without ``_s2_action``."""
    if ACTION not in batch.schema.names:
        return []
    return [(KEY_HEADER, batch.column(KEY)), (ACTION_HEADER, batch.column(ACTION))]


def changelog_metered(key: pa.Array, action: pa.Array) -> pa.Array:
    """The metered bytes ``@key`` and ``@action`` add to each record (int64; null where either is)."""
    fixed = 2 * HEADER_OVERHEAD + len(KEY_HEADER) + len(ACTION_HEADER)
    key_len = pc.cast(pc.binary_length(key), pa.int64())
    return pc.add(pc.add(key_len, pc.cast(pc.binary_length(action), pa.int64())), fixed)


def with_changelog_headers(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A flat batch in the list form: ``_s2_headers`` = ``@key``, ``@action``, then the row's own
    headers; ``_s2_action`` dropped. Other batches are returned as they are."""
    names = batch.schema.names
    if ACTION not in names:
        return batch
    n = len(batch)
    user = batch.column(HEADERS) if HEADERS in names else pa.nulls(n, HEADERS_ARROW_TYPE)
    headers = changelog_headers(
        pc.cast(batch.column(KEY), pa.binary()), pc.cast(batch.column(ACTION), pa.binary()), user
    )
    out = batch.drop_columns([c for c in (ACTION, HEADERS) if c in names])
    return out.add_column(min(1, out.num_columns), pa.field(HEADERS, HEADERS_ARROW_TYPE), headers)


def changelog_headers(key_json: pa.Array, action: pa.Array, user: pa.Array) -> pa.Array:
    """``[(@key, key_json), (@action, action), *user headers]`` per row, built from whole buffers."""
    n = len(key_json)
    # @key's value then @action's lie side by side in one joined buffer: 2n values over it, no gather
    joined = pc.binary_join_element_wise(key_json, action, b"")
    if user.null_count != len(user) or joined.null_count:
        return prepend_headers([(KEY_HEADER, key_json), (ACTION_HEADER, action)], user)
    joined_offsets = _offsets(joined)
    value_offsets = np.empty(2 * n + 1, np.int32)
    value_offsets[0::2] = joined_offsets
    value_offsets[1::2] = joined_offsets[:-1] + _offsets(key_json)[1:] - _offsets(key_json)[:-1]
    values = pa.Array.from_buffers(
        pa.binary(), 2 * n, [None, pa.py_buffer(value_offsets), joined.buffers()[2]]
    )
    name_offsets = np.empty(2 * n + 1, np.int32)
    pair = len(KEY_HEADER) + len(ACTION_HEADER)
    name_offsets[0::2] = np.arange(n + 1, dtype=np.int32) * pair
    name_offsets[1::2] = name_offsets[0:-1:2] + len(KEY_HEADER)
    names = pa.Array.from_buffers(
        pa.binary(), 2 * n, [None, pa.py_buffer(name_offsets), pa.py_buffer((KEY_HEADER + ACTION_HEADER) * n)]
    )
    entries = pa.StructArray.from_arrays([names, values], fields=list(HEADERS_ARROW_TYPE.value_type))
    row_offsets = pa.array(np.arange(0, 2 * n + 1, 2, dtype=np.int32))
    return pa.ListArray.from_arrays(row_offsets, entries, type=HEADERS_ARROW_TYPE)


def _offsets(arr: pa.Array) -> npt.NDArray[np.int32]:
    """A binary array's n+1 offsets, rebased to its first row."""
    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    rebased: npt.NDArray[np.int32] = offsets - offsets[0]
    return rebased
