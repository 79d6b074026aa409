"""The exactly-once hooks a `WritePlan` carries to every task (docs/exactly-once.md, *Per micro-batch*):
`Tagger` tags each append's first record; `TokenKeeper` decides what a ``412`` allows, zombie check first;
`Dedupe` signs each attempt in and, for a retry or replay, fences each stream, reads it back and subtracts
what is already there."""

from __future__ import annotations

import logging
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

from s2_sdk import Record

from s2_sink import _crashpoints
from s2_sink._exactly_once.ends_cache import EndsRef, lookup
from s2_sink._exactly_once.fencing import (
    Attendance,
    TaskAttempt,
    Token,
    fence_if_older,
    judge_current_token,
)
from s2_sink._exactly_once.fingerprint import Fingerprints, fingerprint
from s2_sink._exactly_once.ledger_records import stream_reset
from s2_sink._exactly_once.readback import read_back
from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._exactly_once.sign_in_registers import RollCall, SignIn, sign_in, still_last
from s2_sink._exactly_once.tags import ChunkTag
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.retry import Patience
from s2_sink._transport.runtime import get_pool
from s2_sink.encoders._frame import DLQ_ROW_HASH
from s2_sink.errors import FencedError, ReplayMismatchError

if TYPE_CHECKING:
    from s2_sink._write.write_plan import ChunkInfo, PartitionContext, RecordFilter, WritePlan
    from s2_sink.config import S2Config

__all__ = ["Dedupe", "Replay", "Tagger", "TokenKeeper", "plan_with_layout"]

log = logging.getLogger(__name__)

# How a replay is laid out: by record content (`S2Writer`), or as Spark partitioned it (partition ids
# trusted, or checked against what earlier executions wrote from other partitions).
Replay = Literal["content", "partition", "partition-checked"]

# The attempt on this task thread and its zombie check, set by `Dedupe` before any append: the appender's
# coroutines inherit it, so `TokenKeeper` (called without the task's identity) knows whom it serves.
_current_task: ContextVar[tuple[TaskAttempt, Attendance] | None] = ContextVar("s2sink_eo_task", default=None)


def _attempt(ctx: PartitionContext) -> TaskAttempt:
    return TaskAttempt(ctx.partition_id, ctx.task_attempt_id)


def _attendance(cfg: S2Config, writer_id: str, signed: SignIn) -> Attendance:
    async def still() -> bool:
        basin = get_pool().client(cfg).basin(cfg.basin)
        return await still_last(basin, RollCall(writer_id), signed, patience=Patience.of(cfg))

    return still


@dataclass(frozen=True, slots=True)
class Tagger:
    writer: str
    epoch: int

    def __call__(self, ctx: PartitionContext, chunk: ChunkInfo) -> tuple[bytes, bytes]:
        tag = ChunkTag(
            self.writer,
            self.epoch,
            ctx.batch_id,
            ctx.partition_id,
            ctx.attempt_number,
            chunk.index,
            chunk.record_count,
        )
        return tag.encode()


@dataclass(frozen=True, slots=True)
class TokenKeeper:
    cfg: S2Config
    mine: Token
    written: EndsRef  # streams this writer committed to (a foreign token there means it was displaced)

    async def __call__(self, stream: str, current: str) -> str:
        mine = self.mine
        end = await lookup(self.cfg, self.written, stream)
        take_over = end is None
        judge_current_token(stream, current, mine, may_take_over=take_over)  # FencedError: we must stop
        task = _current_task.get()
        if task is None:
            raise FencedError(
                f"stream {stream!r}: fencing token {current!r} replaced this writer's token {mine}, and "
                "this task cannot tell whether a later attempt of its own partition put a barrier up "
                "since (its recovery hook did not run), so it stops rather than risk writing as a "
                "superseded attempt"
            )
        # Adopting a sibling's barrier, taking a cleared or foreign token back, or fencing over an older
        # run: the zombie check runs first on every path, and any new token is a generation of our own.
        result = await _fence(self.cfg, self.written, stream, mine, end=end, task=task, current=current)
        return str(result)


async def _fence(
    cfg: S2Config,
    ends: EndsRef,
    stream: str,
    mine: Token,
    *,
    end: int | None,
    task: tuple[TaskAttempt, Attendance],
    current: str | None = None,
    bump: bool = False,
) -> Token:
    """Task attempt `task`'s `fence_if_older` on `stream`, whose committed end is `end`."""
    me, attendance = task
    return await fence_if_older(
        get_pool().client(cfg).basin(cfg.basin).stream(stream),
        mine,
        current=current,
        bump=bump,
        may_take_over=end is None,
        me=me,
        end=end,
        writer_id=ends.writer_id,
        attendance=attendance,
        patience=Patience.of(cfg),
    )


@dataclass(slots=True)
class _Filter:
    """`RecordFilter` for one task: per stream, the fingerprints still to subtract (filled lazily)."""

    hook: Dedupe
    ctx: PartitionContext
    retry: bool  # an earlier attempt of this partition may have written in this epoch: fence first
    dlq_stream: str | None = None
    pending: dict[str, Fingerprints] = field(default_factory=dict)
    foreign: dict[str, Fingerprints] = field(default_factory=dict)
    read_ends: dict[str, int] = field(default_factory=dict)

    def __call__(self, stream: str, records: list[Record]) -> list[Record]:
        layout = self.hook.layout
        owner = None if layout is None else _Owner(layout, stream, dead_letters=stream == self.dlq_stream)
        if owner is not None:
            self._check_layout(owner, records)
        left = self.pending.get(stream)
        if left is None:
            left, self.foreign[stream], self.read_ends[stream] = _runtime.run(
                self.hook.written_before(stream, self.ctx, owner, retry=self.retry)
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


@dataclass(frozen=True, slots=True)
class Dedupe:
    cfg: S2Config
    token: str
    writer: str
    epoch: int
    recovery: bool  # a replay after a driver restart
    starts: EndsRef  # per stream, a position before every record of this batch
    replay: Replay = "content"
    layout: RecoveryLayout | None = None  # a content replay's layout: tasks check ownership by it

    def __call__(self, plan: WritePlan, ctx: PartitionContext) -> RecordFilter | None:
        _crashpoints.hit("task_start", batch=ctx.batch_id, partition=ctx.partition_id)
        me = _attempt(ctx)
        # A stage retry restarts attempt numbers at 0: the roll call, not the number, says whether an
        # earlier attempt of this partition may have written (and stops a late zombie before it writes).
        basin = get_pool().client(self.cfg).basin(self.cfg.basin)
        signed = SignIn(self.writer, self.epoch, ctx.batch_id, me)
        earlier = _runtime.run(
            sign_in(basin, RollCall(self.starts.writer_id), signed, patience=Patience.of(self.cfg))
        )
        retry = earlier or ctx.attempt_number > 0
        _current_task.set((me, _attendance(self.cfg, self.starts.writer_id, signed)))
        if not retry and not self.recovery:
            return None
        return _Filter(self, ctx, retry, plan.dlq_stream if self.recovery else None)

    async def written_before(
        self, stream: str, ctx: PartitionContext, owner: _Owner | None = None, *, retry: bool
    ) -> tuple[Fingerprints, Fingerprints, int]:
        """Fence, then read back this batch's fingerprints in `stream`: those to subtract (of a content
        replay only those this task owns), those earlier executions wrote from other partitions, and the
        end of the range read."""
        mine = Token.parse(self.token)
        assert mine is not None
        s2_stream = get_pool().client(self.cfg).basin(self.cfg.basin).stream(stream)
        if self.cfg.create_streams:
            # The barrier is this task's first request to the stream: a routed (or dead-letter) stream
            # that no earlier attempt got to create would refuse the fence with 404 on every retry. Asked
            # of S2, not of the process's cache: the stream may have been deleted since it was created.
            get_pool().forget_stream(self.cfg, stream)
            await get_pool().ensure_stream(self.cfg, stream)
        me = _attempt(ctx)
        end = await lookup(self.cfg, self.starts, stream)
        signed = SignIn(self.writer, self.epoch, ctx.batch_id, me)
        attendance = _attendance(self.cfg, self.starts.writer_id, signed)
        fenced = await _fence(self.cfg, self.starts, stream, mine, end=end, task=(me, attendance), bump=retry)
        batch, partition, recovery = ctx.batch_id, ctx.partition_id, self.recovery
        by_partition = self.replay != "content"

        def match(tag: ChunkTag) -> bool:
            if tag.batch != batch:
                return False
            if recovery and by_partition:
                return tag.partition == partition
            if recovery:
                return True
            return tag.epoch == mine.epoch and tag.partition == partition

        def elsewhere(tag: ChunkTag) -> bool:
            # Earlier executions only: this execution's other tasks are writing their own records right now.
            return tag.batch == batch and tag.epoch < mine.epoch and tag.partition != partition

        found = await read_back(
            s2_stream,
            writer=self.writer,
            start=end or 0,
            match=match,
            elsewhere=elsewhere if recovery and self.replay == "partition-checked" else None,
            owns=None if owner is None or not recovery else lambda h, b: owner.partition(h, b) == partition,
            patience=Patience.of(self.cfg),
        )
        if found.end < found.start:  # a tail below the committed end: the range read was empty, not done
            raise stream_reset(stream, found.start, found.end, self.starts.writer_id)
        log.info(
            "exactly-once read-back stream=%s batch=%s partition=%s attempt=%s recovery=%s token=%s "
            "range=[%s,%s) found=%s records in %s chunks (%s owned by other tasks)",
            stream,
            batch,
            partition,
            ctx.attempt_number,
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


def plan_with_layout(plan: WritePlan, layout: RecoveryLayout) -> WritePlan:
    hook = plan.recovery
    if not isinstance(hook, Dedupe):
        raise TypeError(f"an exactly-once replay needs the Dedupe recovery hook, got {hook!r}")
    return replace(plan, recovery=replace(hook, layout=layout), fixed_layout=True)
