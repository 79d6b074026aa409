"""S2's metered record size, computed over whole Arrow columns."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from s2_sink.encoders._lists import list_parts, per_row_sum

__all__ = ["metered_bytes"]


def metered_bytes(body: pa.Array, headers: pa.Array | None = None) -> pa.Array:
    """Per record: 8 + 2*len(headers) + sum(len(name) + len(value)) + len(body), as s2_sdk.metered_bytes.

    ``headers`` is a ``list<struct<name, value>>`` column (null = no headers), e.g. a record frame's
    ``_s2_headers``. Returns an int64 array.
    """
    size = pc.add(pc.cast(pc.binary_length(body), pa.int64()), 8)
    if headers is None or headers.null_count == len(headers):
        return size
    offsets, entries = list_parts(headers)
    name, value = entries.field(0), entries.field(1)
    entry_size = pc.add(
        pc.add(pc.cast(pc.binary_length(name), pa.int64()), pc.cast(pc.binary_length(value), pa.int64())), 2
    )
    totals = per_row_sum(offsets, pc.fill_null(entry_size, 2))
    if headers.null_count:
        totals = pc.if_else(pc.is_valid(headers), totals, 0)
    return pc.add(size, totals)
