"""S2's metered record size, the one definition: ``8 + len(body)`` plus ``2 + len(name) + len(value)`` per
header (as ``s2_sdk.metered_bytes``). Appends and records are capped in these units.

Two forms of the formula: `metered_bytes` over whole Arrow columns (encoders, the partition writer) and
`metered_size` for one record (dead letters, re-counting a filtered chunk); both are built from the constants
below and tested equal to the SDK.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from s2_sink.encoders._lists import list_parts, per_row_sum

__all__ = ["HEADER_OVERHEAD", "RECORD_OVERHEAD", "header_size", "metered_bytes", "metered_size"]

RECORD_OVERHEAD: Final = 8
"""Metered bytes of a record beyond its body and headers."""

HEADER_OVERHEAD: Final = 2
"""Metered bytes of a header beyond its name and value."""


def header_size(name: bytes, value: bytes) -> int:
    """The metered bytes one header adds to a record."""
    return HEADER_OVERHEAD + len(name) + len(value)


def metered_size(body: bytes, headers: Sequence[tuple[bytes, bytes]]) -> int:
    """The metered size of one record (`metered_bytes` for a single row)."""
    return RECORD_OVERHEAD + len(body) + sum(HEADER_OVERHEAD + len(n) + len(v) for n, v in headers)


def metered_bytes(body: pa.Array, headers: pa.Array | None = None) -> pa.Array:
    """Per record: 8 + 2*len(headers) + sum(len(name) + len(value)) + len(body), as s2_sdk.metered_bytes.

    ``headers`` is a ``list<struct<name, value>>`` column (null = no headers), e.g. a record frame's
    ``_s2_headers``. Returns an int64 array (null where the body is null).
    """
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
