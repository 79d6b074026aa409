"""A read's plan on the driver: the streams and where each starts or ends, a batch read's ranges
(`batch_ranges`), and a streaming read's from one micro-batch's end offset to the next.

`MicroBatches` keeps what one query run learnt (the frontier, streams that joined, recreated streams'
new starts), rebuilt from the offset log on restart. The byte cap reads ahead from the frontier (offsets
are seq_nums, and a tail says nothing about sizes), so a batch's bytes are read twice. Caps, data loss,
read-committed and lag: docs/format-s2.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from s2_sink._read.planning import lookups as _lookups
from s2_sink._read.planning.committed import CommittedEnds
from s2_sink._read.planning.data_loss import Epochs, join, recreated, refuse_or_warn, split
from s2_sink._read.planning.offsets import (
    Offsets,
    advance,
    cap_committed,
    cap_committed_tails,
    cap_total,
    lag_by_stream,
    lag_records,
    max_merge,
    pack_ranges,
    plan_ranges,
    sorted_offsets,
)
from s2_sink._read.read_options import OPT_ENDING_POSITION, OPT_STARTING_POSITION, Bound, ReadOptions
from s2_sink.config import S2Config
from s2_sink.errors import ConfigError

if TYPE_CHECKING:
    from s2_sink._read.session import Range

__all__ = ["MicroBatches", "batch_ranges", "cap_bytes", "resolve_bound", "resolve_streams"]

log = logging.getLogger(__name__)


def resolve_streams(cfg: S2Config, opts: ReadOptions) -> list[str]:
    """The named streams, or the live streams under the prefix (listed again on every call)."""
    if opts.stream_prefix is None:
        return list(opts.streams)
    found = sorted(_lookups.listed_epochs(cfg, opts.stream_prefix))
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
    """A start or end bound as per-stream seq_nums. ``stored_earliest``: ``earliest`` is the first record
    still stored (a streaming read does not count records trimmed before it started as lost). ``committed``:
    read-committed's ends, where ``latest`` stops, so a batch in flight is seen only once committed, and
    whole."""
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


def cap_bytes(cfg: S2Config, frontier: Mapping[str, int], target: Mapping[str, int], limit: int) -> Offsets:
    """Move from ``frontier`` towards ``target`` by at most ``limit`` metered bytes, streams in name order
    each taking at most an even share of what is left; a batch always moves (at least one record)."""
    out = {s: frontier.get(s, 0) for s in {*frontier, *target}}
    pending = sorted(s for s, seq in target.items() if seq > out[s])
    budget = limit
    for index, stream in enumerate(pending):
        share = budget // (len(pending) - index)
        if share <= 0:
            break
        end, used = _lookups.measure_range(cfg, stream, out[stream], target[stream], share)
        out[stream] = end
        budget -= used
    if pending and all(out[s] == frontier.get(s, 0) for s in pending):
        out[pending[0]] += 1
    return out


class MicroBatches:
    """The planning state of one streaming query run, on the driver (plain data: pickles with the reader)."""

    def __init__(self, cfg: S2Config, opts: ReadOptions) -> None:
        self._cfg = cfg
        self._opts = opts
        # Driver-only planning state (lives as long as the query run; rebuilt from the offset log on restart).
        self._initial: Offsets | None = None
        self._frontier: Offsets | None = None
        # First stored seq_num of streams that joined after the start (prefix reads); see `ranges`.
        self._joined: Offsets = {}
        self._last_lag: int | None = None
        self._tails: Offsets | None = None  # what the last `latest` saw (`tails_seen`)
        self._available_now: Offsets | None = None  # the tails an AvailableNow run drains to
        self._epochs: Epochs = {}  # creation times of the streams the frontier was read from (`data_loss`)
        self._restarts: Offsets = {}  # recreated streams: where their new incarnation starts
        by = opts.committed_by
        self._committed = CommittedEnds(cfg, by) if by is not None else None

    def _committed_ends(self) -> Offsets | None:
        """Read-committed: the writer's committed ends, taken before the tails they cap (see `committed`)."""
        return self._committed.fetch() if self._committed is not None else None

    def initial(self) -> dict[str, object]:
        """The first offset of a query with no checkpointed one: the start option's positions."""
        initial = self._initial_positions()
        return join(initial, self._epochs)

    def _initial_positions(self) -> Offsets:
        # Resolved once per run: Spark may ask again before the first batch; "latest" must not move meanwhile.
        if self._initial is None:
            streams = resolve_streams(self._cfg, self._opts)
            self._initial = resolve_bound(
                self._cfg,
                self._opts.start,
                streams,
                option=OPT_STARTING_POSITION,
                stored_earliest=True,
                committed=self._committed_ends(),
            )
            self._epochs = _lookups.stream_epochs(self._cfg, list(self._initial))
            log.info("s2 source: initial offsets %s", self._initial)
        self._frontier = max_merge(self._frontier or {}, self._initial)
        return dict(self._initial)

    def latest(
        self, start: dict[str, object] | None, max_records: int | None, max_bytes: int | None
    ) -> dict[str, object]:
        """The next end offset from ``start`` (None: from the tracked frontier), within the caps."""
        if start is None:
            # pyspark 4.1: no start offset, so caps apply from the tracked frontier.
            frontier = self._frontier if self._frontier is not None else self._initial_positions()
            was = dict(self._epochs)
        else:
            frontier, was = split(start)
            was = {**self._epochs, **was}
        prefix = self._opts.stream_prefix
        # A prefix read's one listing names the streams and their creation times.
        listed = _lookups.listed_epochs(self._cfg, prefix) if prefix is not None else None
        streams = sorted(listed) if listed is not None else list(self._opts.streams)
        committed = self._committed_ends()
        # Under a prefix a listed stream may be deleted before its tail is read: skip it then.
        found = _lookups.tails(self._cfg, streams, missing_ok=prefix is not None)
        if listed is not None:
            now = {s: listed[s] for s in found if s in listed}
        else:
            now = _lookups.stream_epochs(self._cfg, list(found))
        frontier = self._restart_recreated(frontier, was, now, found)
        self._epochs.update(now)
        found = cap_committed_tails(found, committed, fail=self._opts.fail_on_data_loss)
        self._tails = sorted_offsets(found)
        if self._available_now is not None:
            # An AvailableNow run reads up to the tails it started with, and no stream created since.
            found = {s: min(t, self._available_now[s]) for s, t in found.items() if s in self._available_now}
        joined = [s for s in found if s not in frontier]
        if joined:
            # A stream new to the query is read from its first stored record: earlier ones are not a loss.
            frontier = max_merge(frontier, self._first_stored(self._joined, joined, fresh=True))
        target = advance(frontier, found)
        end = cap_total(frontier, target, max_records)
        if max_bytes is not None:
            # Whichever cap comes first: measure bytes only within what the record cap allows.
            end = cap_bytes(self._cfg, frontier, end, max_bytes)
        end = sorted_offsets(end)
        self._frontier = max_merge(self._frontier or {}, end)
        self._log_lag(frontier, end, found)
        return join(end, {**was, **now})

    def _first_stored(self, known: Offsets, streams: list[str], *, fresh: bool = False) -> Offsets:
        """The first stored seq_num of ``streams``, looked up where ``known`` lacks it (for all when
        ``fresh``) and remembered."""
        unknown = streams if fresh else [s for s in streams if s not in known]
        if unknown:
            known.update(_lookups.first_seqs(self._cfg, unknown))
        return {s: known[s] for s in streams}

    def _restart_recreated(self, frontier: Offsets, was: Epochs, now: Epochs, tails: Offsets) -> Offsets:
        """The frontier with each recreated stream moved to its new first record, or the query failed under
        s2.fail-on-data-loss=true."""
        streams = recreated(frontier, was, now, tails)
        if not streams:
            return frontier
        firsts = {} if self._opts.fail_on_data_loss else _lookups.first_seqs(self._cfg, streams)
        for stream in streams:  # fails on the first one unless told to go on
            refuse_or_warn(
                self._cfg.basin,
                stream,
                position=frontier[stream],
                tail=tails.get(stream),
                was=was.get(stream),
                now=now.get(stream),
                fail=self._opts.fail_on_data_loss,
                restart_at=firsts.get(stream),
            )
        self._restarts.update(firsts)
        if self._frontier is not None:
            self._frontier.update(firsts)  # max_merge would keep the old stream's higher position
        return {**frontier, **firsts}

    def drain_to_tails(self) -> None:
        """Trigger.AvailableNow: end the run at today's tails."""
        streams = resolve_streams(self._cfg, self._opts)
        committed = self._committed_ends()
        tails = _lookups.tails(self._cfg, streams, missing_ok=self._opts.stream_prefix is not None)
        self._available_now = cap_committed_tails(tails, committed, fail=self._opts.fail_on_data_loss)
        log.info("s2 source: AvailableNow run reads up to %s", self._available_now)

    def tails_seen(self) -> dict[str, int] | None:
        """The tails the last `latest` saw (capped by the committed ends under read-committed)."""
        return dict(self._tails) if self._tails is not None else None

    def _log_lag(self, frontier: Offsets, end: Offsets, found: dict[str, int]) -> None:
        planned = sum(end[s] - frontier.get(s, 0) for s in end)
        lag = lag_records(end, found)
        # An idle query asks every trigger: log when a batch is planned or the lag moved, not on every poll.
        if planned or lag != self._last_lag:
            log.info(
                "s2 source: planned batch batch_records=%d lag_records=%d streams=%d lag_by_stream=%s",
                planned,
                lag,
                len(found),
                {s: n for s, n in lag_by_stream(end, found).items() if n},
            )
        self._last_lag = lag

    def ranges(self, start: dict[str, object], end: dict[str, object]) -> list[list[Range]]:
        """The micro-batch's ranges grouped by Spark partition; records what they tell of the frontier (after
        a restart, Spark's first call restores it)."""
        (begin, was), (stop, now) = split(start), split(end)
        again = recreated(begin, was, now, stop)
        if again:
            # The batch in which a stream was found recreated reads the new one from its first record
            # (looked up again when the batch is replayed after a restart).
            firsts = self._first_stored(self._restarts, again)
            begin = {**begin, **{s: min(firsts[s], stop[s]) for s in again}}
            if self._frontier is not None:
                self._frontier.update({s: stop[s] for s in again})
        self._frontier = max_merge(self._frontier or {}, stop)
        self._epochs.update(now)
        joined = [s for s in stop if s not in begin]
        if joined:
            # The previous end does not name a stream that joined in this batch: start it where `latest`
            # found its first stored record (looked up again after a restart).
            firsts = self._first_stored(self._joined, joined)
            begin = {**{s: min(firsts[s], stop[s]) for s in joined}, **begin}
        per_partition = self._opts.records_per_partition
        return pack_ranges(plan_ranges(begin, stop, per_partition), per_partition)
