"""Offsets of the s2 source (``{stream name: next seq_num to read}``) and the pure arithmetic of planning on
them: merges, caps, ranges per partition, lag.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from s2_sink.errors import ReadError

if TYPE_CHECKING:
    from s2_sink._read.session import Range

__all__ = [
    "Offsets",
    "advance",
    "cap_committed",
    "cap_committed_tails",
    "cap_total",
    "lag_by_stream",
    "lag_records",
    "max_merge",
    "pack_ranges",
    "plan_ranges",
    "sorted_offsets",
]

log = logging.getLogger(__name__)

Offsets = dict[str, int]

MAX_RANGES_PER_PARTITION: Final = 1000
"""Ranges one partition reads at most. A range costs its task an S2 read session (a round trip, read
several at once), far less than a Spark task's floor, so a thousand small streams share one task; past
that, more partitions let more cores read."""

SHARED_RANGE_FRACTION: Final = 10
"""A range shares a partition only when it holds at most 1/10 of ``s2.records-per-partition`` records: a
stream of tens of thousands of records keeps a task of its own, so medium streams still read on as many cores
as before, while a stream of a few hundred records does not cost a Spark task (Spark packs small files, not
large ones, into a partition the same way)."""


def sorted_offsets(offsets: Offsets) -> Offsets:
    """Offsets in name order: Spark compares offsets by their JSON text."""
    return {stream: int(offsets[stream]) for stream in sorted(offsets)}


def max_merge(a: Mapping[str, int], b: Mapping[str, int]) -> Offsets:
    out = dict(a)
    for stream, seq in b.items():
        out[stream] = max(out.get(stream, 0), seq)
    return out


def advance(frontier: Mapping[str, int], tails: Mapping[str, int]) -> Offsets:
    """Every stream at its tail, never behind the frontier: a stream new to it (under a prefix) starts at 0,
    and a stream no longer listed keeps its position."""
    out = dict(frontier)
    for stream, tail in tails.items():
        out[stream] = max(frontier.get(stream, 0), tail)
    return out


def cap_committed(positions: Mapping[str, int], committed: Mapping[str, int] | None) -> Offsets:
    """``positions`` no further than a writer's committed ends; a stream it never committed to is capped at
    0."""
    if committed is None:
        return dict(positions)
    return {stream: min(seq, committed.get(stream, 0)) for stream, seq in positions.items()}


def cap_committed_tails(
    tails: Mapping[str, int], committed: Mapping[str, int] | None, *, fail: bool
) -> Offsets:
    """`cap_committed` of the tails, where a tail below its committed end means the stream was recreated and
    holds nothing committed: ``min(tail, end)`` would cap inside uncommitted data, so the read fails
    (``fail``) or reads none of it (capped at 0) until the writer commits there."""
    if committed is None:
        return dict(tails)
    reset = {s: (t, committed[s]) for s, t in tails.items() if t < committed.get(s, 0)}
    if reset and fail:
        stream, (tail, end) = min(reset.items())
        raise ReadError(
            f"s2 source (read-committed): stream {stream!r} ends at {tail}, below the end {end} the "
            "writer's ledger (option s2.committed-by) committed for it: the stream was deleted and "
            "recreated, so the committed records are gone and what it holds now is not committed. "
            "Restart once the writer goes on with the new stream (s2-sink ledger forget), set "
            "s2.fail-on-data-loss=false to skip it until the writer commits in it again, or read with "
            "s2.isolation=read-uncommitted"
        )
    for stream, (tail, end) in sorted(reset.items()):
        log.warning(
            "s2 source: stream %s ends at %s, below its committed end %s (deleted and recreated): "
            "reading none of it until the writer commits in it again",
            stream,
            tail,
            end,
        )
    capped = cap_committed(tails, committed)
    return {s: 0 if s in reset else seq for s, seq in capped.items()}


def cap_total(frontier: Mapping[str, int], target: Mapping[str, int], limit: int | None) -> Offsets:
    """Move from ``frontier`` towards ``target`` by at most ``limit`` records, shared by water-filling (the
    smallest demands take all they want, the rest split what is left evenly): deterministic, so replanning
    agrees."""
    if limit is None:
        return max_merge(frontier, target)
    out = {s: frontier.get(s, 0) for s in {*frontier, *target}}
    pending = {s: seq - out[s] for s, seq in target.items() if seq > out[s]}
    budget = limit
    # Smallest demand first: whatever a stream does not use rolls over to the larger ones after it.
    order = sorted(pending, key=lambda s: (pending[s], s))
    for index, stream in enumerate(order):
        share = budget // (len(order) - index)
        take = min(pending[stream], share if index < len(order) - 1 else budget)
        out[stream] += take
        budget -= take
    return out


def plan_ranges(start: Mapping[str, int], end: Mapping[str, int], per_partition: int) -> list[Range]:
    ranges: list[Range] = []
    for stream in sorted(end):
        lo = start.get(stream, 0)
        hi = end[stream]
        while lo < hi:
            stop = min(hi, lo + per_partition)
            ranges.append((stream, lo, stop))
            lo = stop
    return ranges


def pack_ranges(
    ranges: Sequence[Range], per_partition: int, *, max_ranges: int = MAX_RANGES_PER_PARTITION
) -> list[list[Range]]:
    """``ranges`` grouped, in order, into partitions of at most ``per_partition`` records and ``max_ranges``
    ranges; a range of more than ``per_partition // SHARED_RANGE_FRACTION`` records stays alone."""
    small = per_partition // SHARED_RANGE_FRACTION
    parts: list[list[Range]] = []
    current: list[Range] = []
    records = 0
    for rng in ranges:
        n = rng[2] - rng[1]
        if current and (n > small or records + n > per_partition or len(current) >= max_ranges):
            parts.append(current)
            current, records = [], 0
        if n > small:
            parts.append([rng])
            continue
        current.append(rng)
        records += n
    if current:
        parts.append(current)
    return parts


def lag_by_stream(end: Mapping[str, int], tails: Mapping[str, int]) -> dict[str, int]:
    return {stream: max(tail - end.get(stream, 0), 0) for stream, tail in sorted(tails.items())}


def lag_records(end: Mapping[str, int], tails: Mapping[str, int]) -> int:
    return sum(lag_by_stream(end, tails).values())
