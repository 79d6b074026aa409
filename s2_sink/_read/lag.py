"""Reader lag of the s2 source: records stored after a planned end offset, per stream and in total."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["lag_by_stream", "lag_records"]


def lag_by_stream(end: Mapping[str, int], tails: Mapping[str, int]) -> dict[str, int]:
    """Records between ``end`` and the tail of every stream whose tail is known (never negative)."""
    return {stream: max(tail - end.get(stream, 0), 0) for stream, tail in sorted(tails.items())}


def lag_records(end: Mapping[str, int], tails: Mapping[str, int]) -> int:
    """Records between ``end`` and the tails, over all streams."""
    return sum(lag_by_stream(end, tails).values())
