"""Driver-side planning of the batch and streaming readers: which streams, where they start and end."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from s2_sink._read import s2io as _s2io
from s2_sink._read.offsets import Offsets, cap_committed_tails
from s2_sink._read.read_options import Bound, ReadOptions
from s2_sink.config import S2Config
from s2_sink.errors import ConfigError

__all__ = ["resolve_bound", "resolve_streams", "sorted_offsets"]

log = logging.getLogger(__name__)


def sorted_offsets(offsets: Offsets) -> Offsets:
    """Offsets with keys in name order: Spark compares offsets by their JSON text, so order must be stable."""
    return {stream: int(offsets[stream]) for stream in sorted(offsets)}


def resolve_streams(cfg: S2Config, opts: ReadOptions) -> list[str]:
    """The named streams, or the live streams under the prefix (listed again on every call)."""
    if opts.stream_prefix is None:
        return list(opts.streams)
    found = _s2io.list_streams(cfg, opts.stream_prefix)
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
            return sorted_offsets(_s2io.first_seqs(cfg, streams))
        return sorted_offsets(dict.fromkeys(streams, 0))
    if bound.kind == "latest":
        return sorted_offsets(cap_committed_tails(_s2io.tails(cfg, streams), committed, fail=True))
    if bound.kind == "timestamp":
        assert bound.timestamp is not None
        return sorted_offsets(_s2io.resolve_timestamp(cfg, streams, bound.timestamp))
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
