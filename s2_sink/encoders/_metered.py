"""S2's metered record size, the one definition: ``8 + len(body)`` plus ``2 + len(name) + len(value)`` per
header (as ``s2_sdk.metered_bytes``), over whole Arrow columns (`metered_bytes`) or one record
(`metered_size`); both tested equal to the SDK.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from s2_sink.encoders._frame import list_parts, per_row_sum

__all__ = ["HEADER_OVERHEAD", "RECORD_OVERHEAD", "header_size", "metered_bytes", "metered_size"]

RECORD_OVERHEAD: Final = 8

HEADER_OVERHEAD: Final = 2


def header_size(name: bytes, value: bytes) -> int:
    return HEADER_OVERHEAD + len(name) + len(value)


def metered_size(body: bytes, headers: Sequence[tuple[bytes, bytes]]) -> int:
    return RECORD_OVERHEAD + len(body) + sum(HEADER_OVERHEAD + len(n) + len(v) for n, v in headers)


def metered_bytes(body: pa.Array, headers: pa.Array | None = None) -> pa.Array:
    """Per record (int64, null where the body is null); ``headers``: ``list<struct<name, value>>``."""
    size = pc.add(pc.cast(pc.binary_length(body), pa.int64()), RECORD_OVERHEAD)
    if headers is None or headers.null_count == len(headers):
        return size
    offsets, entries = list_parts(headers)
    name, value = entries.field(0), entries.field(1)
    entry_size = pc.add(
        pc.add(pc.cast(pc.binary_length(name), pa.int64()), pc.cast(pc.binary_length(value), pa.int64())),
        HEADER_OVERHEAD,
    )
    totals = per_row_sum(offsets, pc.fill_null(entry_size, HEADER_OVERHEAD))
    if headers.null_count:
        totals = pc.if_else(pc.is_valid(headers), totals, 0)
    return pc.add(size, totals)
