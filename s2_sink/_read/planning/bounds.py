"""Driver-side planning of the batch and streaming readers: which streams, where they start and end; and
the ranges of a batch read."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from s2_sink._read.planning import lookups as _lookups
from s2_sink._read.planning.offsets import (
    Offsets,
    cap_committed,
    cap_committed_tails,
    pack_ranges,
    plan_ranges,
    sorted_offsets,
)
from s2_sink._read.read_options import OPT_ENDING_POSITION, OPT_STARTING_POSITION, Bound, ReadOptions
from s2_sink.config import S2Config
from s2_sink.errors import ConfigError

if TYPE_CHECKING:
    from s2_sink._read.session import Range

__all__ = ["batch_ranges", "resolve_bound", "resolve_streams"]

log = logging.getLogger(__name__)


def resolve_streams(cfg: S2Config, opts: ReadOptions) -> list[str]:
    """The named streams, or the live streams under the prefix (listed again on every call)."""
    if opts.stream_prefix is None:
        return list(opts.streams)
    found = _lookups.list_streams(cfg, opts.stream_prefix)
    log.debug("s2 source: %d streams under prefix %r", len(found), opts.stream_prefix)
    return found


def resolve_bound(
    cfg: S2Config,
    bound: Bound,
    streams: Sequence[str],
    *,
    option: str,
    stored_earliest: bool = False,
    committed: Mapping[str, int] | None = None,
) -> Offsets:
    """Turn a start/end bound into per-stream seq_nums.

    ``stored_earliest``: ``earliest`` is the first record still stored rather than seq_num 0, so that a
    streaming read checking for data loss does not count records trimmed before it started.
    ``committed``: a read-committed read's committed ends, where ``latest`` stops (Kafka's last stable
    offset): a read starting there sees the micro-batch in flight only once it commits, and whole.
    """
    if not streams:
        return {}
    if bound.kind == "earliest":
        if stored_earliest:
            return sorted_offsets(_lookups.first_seqs(cfg, streams))
        return sorted_offsets(dict.fromkeys(streams, 0))
    if bound.kind == "latest":
        return sorted_offsets(cap_committed_tails(_lookups.tails(cfg, streams), committed, fail=True))
    if bound.kind == "timestamp":
        assert bound.timestamp is not None
        return sorted_offsets(_lookups.resolve_timestamp(cfg, streams, bound.timestamp))
    given = bound.seq_num_map()
    unknown = sorted(set(given) - set(streams))
    if unknown:
        raise ConfigError(
            f"option {option} names streams that are not read: {unknown!r} (reading {list(streams)!r})"
        )
    rest = [s for s in streams if s not in given]
    defaults = resolve_bound(
        cfg,
        Bound(kind=bound.default),
        rest,
        option=option,
        stored_earliest=stored_earliest,
        committed=committed,
    )
    return sorted_offsets({**defaults, **{s: given[s] for s in streams if s in given}})


def batch_ranges(cfg: S2Config, opts: ReadOptions) -> list[list[Range]]:
    """The ``(stream, first, stop)`` ranges of a batch read, grouped by Spark partition."""
    from s2_sink._read.planning.committed import CommittedEnds  # noqa: PLC0415 - read-committed only

    streams = resolve_streams(cfg, opts)
    # Read-committed: the committed ends first, then the tails (see `committed`).
    by = opts.committed_by
    committed = CommittedEnds(cfg, by).fetch() if by is not None else None
    start = resolve_bound(cfg, opts.start, streams, option=OPT_STARTING_POSITION, committed=committed)
    end = resolve_bound(cfg, opts.end, streams, option=OPT_ENDING_POSITION, committed=committed)
    end = cap_committed(end, committed)  # explicit seq_num and timestamp ends too
    if opts.materialize:
        # The latest row per key needs the key's whole history in one task: one partition per stream.
        per_partition = max([end[s] - start.get(s, 0) for s in end] + [1])
    else:
        per_partition = opts.records_per_partition
    parts = pack_ranges(plan_ranges(start, end, per_partition), per_partition)
    log.info("s2 source: batch read of %d streams in %d partitions", len(streams), len(parts))
    return parts
