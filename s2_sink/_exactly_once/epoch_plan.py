"""How the tasks write one micro-batch under an exactly-once epoch, for both front doors
(docs/exactly-once.md, *Per micro-batch*): `EpochPlan.tagger` tags each append's first record;
`EpochPlan.keeper` decides what a ``412`` allows, zombie check first; `EpochPlan.dedupe` signs each attempt
in and, for a retry or replay, fences each stream, reads it back and subtracts what is already there."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar, Final, Literal

from s2_sdk import Record

from s2_sink import _crashpoints
from s2_sink._exactly_once.ends_cache import EndsRef, lookup
from s2_sink._exactly_once.fencing import Attendance, TaskAttempt, Token, fence_if_older, judge_current_token
from s2_sink._exactly_once.ledger import LedgerState
from s2_sink._exactly_once.ledger_records import stream_reset
from s2_sink._exactly_once.readback import Fingerprints, fingerprint, read_back
from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._exactly_once.sign_in_registers import SignIn, sign_in, still_last
from s2_sink._exactly_once.tags import TAG_RESERVE_BYTES, ChunkTag
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.retry import Patience
from s2_sink._transport.runtime import get_pool
from s2_sink.encoders._frame import DLQ_ROW_HASH
from s2_sink.errors import FencedError, ReplayMismatchError

if TYPE_CHECKING:
    from s2_sink._write.write_plan import ChunkInfo, PartitionContext, RecordFilter, WritePlan
    from s2_sink.config import S2Config

__all__ = ["EpochPlan", "Replay", "already_committed", "epoch_plan", "newest_tokens", "plan_with_layout"]

log = logging.getLogger(__name__)

# A blind re-send of a chunk that may already be applied could duplicate it: under exactly-once the SDK
# retries only what certainly had no side effects, and the task retry's dedupe hook sorts out the rest.
_RETRY_POLICY: Final = "NO_SIDE_EFFECTS"
# Newer generations a plan carries, highest first: it must not grow with the routed streams written.
_MAX_SHIPPED_TOKENS: Final = 16

# How a replay is laid out: by record content (`S2Writer`), or as Spark partitioned it (partition ids
# trusted, or checked against what earlier executions wrote from other partitions).
Replay = Literal["content", "partition", "partition-checked"]

# The attempt on this task thread and its zombie check, set by `EpochPlan.dedupe` before any append: the
# appender's coroutines inherit it, so `EpochPlan.keeper` (called without the task's identity) knows whom
# it serves.
_current_task: ContextVar[tuple[TaskAttempt, Attendance] | None] = ContextVar("s2sink_eo_task", default=None)


@dataclass(frozen=True, slots=True)
class EpochPlan:
    """Writer hash `writer`'s `epoch` from the last commit's ends `starts`; its three task hooks go into
    the `WritePlan` as bound methods (they pickle with the plan)."""

    cfg: S2Config  # with the NO_SIDE_EFFECTS append retry policy
    writer: str
    epoch: int
    starts: EndsRef  # per stream, a position before every record of this batch
    recovery: bool  # a replay after a driver restart
    replay: Replay = "content"
    layout: RecoveryLayout | None = None  # a content replay's layout: tasks check ownership by it
    # Per stream, a newer generation an earlier batch's task retry left there: tasks start with it (no 412).
    tokens: Mapping[str, str] = field(default_factory=dict)
    tag_reserve: ClassVar[int] = TAG_RESERVE_BYTES

    @property
    def mine(self) -> Token:
        return Token(epoch=self.epoch, gen=0, writer=self.writer)

    @property
    def token(self) -> str:
        return self.mine.encode()

    def tagger(self, ctx: PartitionContext, chunk: ChunkInfo) -> tuple[bytes, bytes]:
        b, p, a = ctx.batch_id, ctx.partition_id, ctx.attempt_number
        return ChunkTag(self.writer, self.epoch, b, p, a, chunk.index, chunk.record_count).encode()

    async def keeper(self, stream: str, current: str) -> str:
        end = await lookup(self.cfg, self.starts, stream)  # None: never committed to, a foreign token may go
        judge_current_token(stream, current, self.mine, may_take_over=end is None)  # FencedError: stop
        task = _current_task.get()
        if task is None:
            raise FencedError(
                f"stream {stream!r}: fencing token {current!r} replaced this writer's token {self.mine}, and "
                "this task cannot tell whether a later attempt of its own partition put a barrier up "
                "since (its recovery hook did not run), so it stops rather than risk writing as a "
                "superseded attempt"
            )
        # Adopting a sibling's barrier, taking a cleared or foreign token back, or fencing over an older
        # run: the zombie check runs first on every path, and any new token is a generation of our own.
        return str(await self._fence(stream, end=end, task=task, current=current))

    async def _fence(
        self,
        stream: str,
        *,
        end: int | None,
        task: tuple[TaskAttempt, Attendance],
        current: str | None = None,
        bump: bool = False,
    ) -> Token:
        """Task attempt `task`'s `fence_if_older` on `stream`, whose committed end is `end`."""
        return await fence_if_older(
            get_pool().client(self.cfg).basin(self.cfg.basin).stream(stream),
            self.mine,
            current=current,
            bump=bump,
            may_take_over=end is None,
            me=task[0],
            end=end,
            writer_id=self.starts.writer_id,
            attendance=task[1],
            patience=Patience.of(self.cfg),
        )

    def dedupe(self, plan: WritePlan, ctx: PartitionContext) -> RecordFilter | None:
        _crashpoints.hit("task_start", batch=ctx.batch_id, partition=ctx.partition_id)
        me = TaskAttempt(ctx.partition_id, ctx.task_attempt_id)
        # A stage retry restarts attempt numbers at 0: the roll call, not the number, says whether an
        # earlier attempt of this partition may have written (and stops a late zombie before it writes).
        cfg, roll, patience = self.cfg, self.starts.writer_id, Patience.of(self.cfg)
        signed = SignIn(self.writer, self.epoch, ctx.batch_id, me)
        earlier = _runtime.run(
            sign_in(get_pool().client(cfg).basin(cfg.basin), roll, signed, patience=patience)
        )

        async def attendance() -> bool:
            return await still_last(get_pool().client(cfg).basin(cfg.basin), roll, signed, patience=patience)

        task = (me, attendance)
        _current_task.set(task)
        retry = earlier or ctx.attempt_number > 0
        if not retry and not self.recovery:
            return None
        return _Filter(self, ctx, task, retry, plan.dlq_stream if self.recovery else None)


def epoch_plan(
    cfg: S2Config,
    writer: str,
    epoch: int,
    starts: Mapping[str, int] | EndsRef,
    *,
    recovery: bool,
    writer_id: str,
    replay: Replay = "content",
    tokens: Mapping[str, str] | None = None,
) -> EpochPlan:
    """The plan of `writer` in `epoch`; of `tokens` (per stream, the last earlier tasks appended with) only
    this epoch's newer generations are shipped."""
    ends = starts if isinstance(starts, EndsRef) else EndsRef(writer_id, dict(starts))
    newer: list[tuple[int, str, str]] = []
    for stream, text in (tokens or {}).items():
        token = Token.parse(text)
        if token is not None and (token.writer, token.epoch) == (writer, epoch) and token.gen > 0:
            newer.append((token.gen, stream, text))
    shipped = {stream: text for _, stream, text in sorted(newer, reverse=True)[:_MAX_SHIPPED_TOKENS]}
    eo_cfg = cfg.replace(append_retry_policy=_RETRY_POLICY)
    return EpochPlan(eo_cfg, writer, epoch, ends, recovery, replay, tokens=shipped)


def newest_tokens(tokens: Mapping[str, str], reported: Mapping[str, Iterable[str]]) -> dict[str, str]:
    out = dict(tokens)
    for stream, texts in reported.items():
        for text in texts:
            new, old = Token.parse(text), Token.parse(out.get(stream, ""))
            if new is not None and (old is None or (old.writer == new.writer and new > old)):
                out[stream] = text
    return out


def already_committed(state: LedgerState, writer_id: str, batch_id: int) -> bool:
    """Whether the ledger has `batch_id` (Spark lost its own commit): write nothing."""
    if batch_id > state.committed:
        return False
    log.info(
        "exactly-once: batch %s of writer %s already committed (ledger at %s); writing nothing",
        batch_id,
        writer_id,
        state.committed,
    )
    return True


def plan_with_layout(plan: WritePlan, layout: RecoveryLayout) -> WritePlan:
    epoch = getattr(plan.recovery, "__self__", None)
    if not isinstance(epoch, EpochPlan):
        raise TypeError(
            f"an exactly-once replay needs the EpochPlan.dedupe recovery hook, got {plan.recovery!r}"
        )
    return replace(plan, recovery=replace(epoch, layout=layout).dedupe, fixed_layout=True)


@dataclass(slots=True)
class _Filter:
    """`RecordFilter` for one task: per stream, the fingerprints still to subtract (filled lazily)."""

    epoch: EpochPlan
    ctx: PartitionContext
    task: tuple[TaskAttempt, Attendance]
    retry: bool  # an earlier attempt of this partition may have written in this epoch: fence first
    dlq_stream: str | None = None
    pending: dict[str, Fingerprints] = field(default_factory=dict)
    foreign: dict[str, Fingerprints] = field(default_factory=dict)
    read_ends: dict[str, int] = field(default_factory=dict)

    def __call__(self, stream: str, records: list[Record]) -> list[Record]:
        layout = self.epoch.layout
        owner = None if layout is None else _Owner(layout, stream, dead_letters=stream == self.dlq_stream)
        if owner is not None:
            self._check_layout(owner, records)
        left = self.pending.get(stream)
        if left is None:
            left, self.foreign[stream], self.read_ends[stream] = _runtime.run(
                self._written_before(stream, owner)
            )
            self.pending[stream] = left
        foreign = self.foreign[stream]
        if not left and not foreign:
            return records
        kept: list[Record] = []
        for rec in records:
            fp = fingerprint(stream, rec.headers, rec.body)
            n = left.get(fp, 0)
            if n > 0:
                if n == 1:
                    del left[fp]  # an empty multiset turns the filter off for this stream
                else:
                    left[fp] = n - 1
            elif fp in foreign:
                raise ReplayMismatchError(
                    f"exactly-once: micro-batch {self.ctx.batch_id} replays a batch that a failed run "
                    f"partly wrote, and a record partition {self.ctx.partition_id} still has to write to "
                    f"stream {stream!r} was written by that run from another partition. Either the replay "
                    "is partitioned differently (SPARK-28650) or identical records are spread over several "
                    "partitions: no single task can tell whether this copy is new, so the task stops "
                    "before writing it (nothing was duplicated). If this query's partitioning does not "
                    "change between runs (same source partitions, input splits and "
                    "spark.sql.shuffle.partitions), restart with option s2.replay-partitioning=same; "
                    "otherwise write with foreachBatch(S2Writer(...)), which repartitions replays by "
                    "record content"
                )
            else:
                kept.append(rec)
        if len(kept) != len(records):
            log.info(
                "exactly-once: skipped %s already-written records stream=%s batch=%s partition=%s attempt=%s",
                len(records) - len(kept),
                stream,
                self.ctx.batch_id,
                self.ctx.partition_id,
                self.ctx.attempt_number,
            )
        return kept

    def _check_layout(self, owner: _Owner, records: list[Record]) -> None:
        """Fail closed unless every record is this task's under the content layout: otherwise two tasks
        could both subtract one earlier copy, losing a record."""
        mine, stream, layout = self.ctx.partition_id, owner.stream, owner.layout
        for rec in records:
            theirs = owner.partition(rec.headers, rec.body)
            if theirs != mine:
                raise ReplayMismatchError(
                    f"exactly-once: micro-batch {self.ctx.batch_id} replays a batch that a failed run "
                    f"partly wrote and must be laid out by record content ({layout.partitions} hash "
                    f"partitions), but partition {mine} holds a record of stream {stream!r} that belongs "
                    f"to partition {theirs}: the replay was repartitioned or coalesced after the writer "
                    "laid it out. The task stops before writing anything it cannot account for; write "
                    "the replay's frame as the delivery mode returns it (WritePlan.fixed_layout)"
                )

    async def _written_before(
        self, stream: str, owner: _Owner | None
    ) -> tuple[Fingerprints, Fingerprints, int]:
        """Fence, then read back this batch's fingerprints in `stream`: those to subtract (of a content
        replay only those this task owns), those earlier executions wrote from other partitions, and the
        end of the range read."""
        plan, cfg = self.epoch, self.epoch.cfg
        if cfg.create_streams:
            # The barrier is this task's first request to the stream: a routed (or dead-letter) stream
            # that no earlier attempt got to create would refuse the fence with 404 on every retry. Asked
            # of S2, not of the process's cache: the stream may have been deleted since it was created.
            get_pool().forget_stream(cfg, stream)
            await get_pool().ensure_stream(cfg, stream)
        end = await lookup(cfg, plan.starts, stream)
        fenced = await plan._fence(stream, end=end, task=self.task, bump=self.retry)
        batch, partition, recovery, epoch = (
            self.ctx.batch_id,
            self.ctx.partition_id,
            plan.recovery,
            plan.epoch,
        )
        by_partition = plan.replay != "content"

        def match(tag: ChunkTag) -> bool:
            if tag.batch != batch:
                return False
            if recovery and by_partition:
                return tag.partition == partition
            return recovery or (tag.epoch == epoch and tag.partition == partition)

        def elsewhere(tag: ChunkTag) -> bool:
            # Earlier executions only: this execution's other tasks are writing their own records right now.
            return tag.batch == batch and tag.epoch < epoch and tag.partition != partition

        found = await read_back(
            get_pool().client(cfg).basin(cfg.basin).stream(stream),
            writer=plan.writer,
            start=end or 0,
            match=match,
            elsewhere=elsewhere if recovery and plan.replay == "partition-checked" else None,
            owns=None if owner is None or not recovery else lambda h, b: owner.partition(h, b) == partition,
            patience=Patience.of(cfg),
        )
        if found.end < found.start:  # a tail below the committed end: the range read was empty, not done
            raise stream_reset(stream, found.start, found.end, plan.starts.writer_id)
        log.info(
            "exactly-once read-back stream=%s batch=%s partition=%s attempt=%s recovery=%s token=%s "
            "range=[%s,%s) found=%s records in %s chunks (%s owned by other tasks)",
            stream,
            batch,
            partition,
            self.ctx.attempt_number,
            recovery,
            fenced,
            found.start,
            found.end,
            sum(found.fingerprints.values()),
            len(found.chunks),
            found.not_owned,
        )
        return Counter(found.fingerprints), Counter(found.elsewhere), found.end


@dataclass(frozen=True, slots=True)
class _Owner:
    """Which replay task owns a record of `stream` under `layout`: a data record by its content, a dead
    letter by its bad row's content hash (``s2sink-row-hash``; a dead letter without one is nobody's)."""

    layout: RecoveryLayout
    stream: str
    dead_letters: bool

    def partition(self, headers: list[tuple[bytes, bytes]], body: bytes) -> int | None:
        if not self.dead_letters:
            return self.layout.partition_of(self.stream, headers, body)
        for name, value in headers:
            if name == DLQ_ROW_HASH:
                try:
                    content = int(value, 16)
                except ValueError:
                    return None
                return self.layout.partition_of_hash(content - (1 << 64) if content >> 63 else content)
        return None
