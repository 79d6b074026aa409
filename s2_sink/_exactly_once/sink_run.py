"""Exactly-once for ``df.writeStream.format("s2")``: one fencing epoch per run of clean micro-batches.

A Python streaming sink has no driver step that knows the batch id before its tasks run, so the epoch opens
when the writer is pickled (`open_sink_run`), tasks plan their batch (`SinkRun.plan_batch`) and ``commit``
closes it (`commit_sink_run`). docs/exactly-once.md, *df.writeStream.format("s2")*.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from s2_sink import _crashpoints
from s2_sink._exactly_once.coordinator import Coordinator, check_identity
from s2_sink._exactly_once.ends_cache import EndsRef
from s2_sink._exactly_once.epoch_plan import EpochPlan, already_committed, epoch_plan
from s2_sink._exactly_once.fencing import writer_hash
from s2_sink._exactly_once.ledger import Ledger, LedgerState
from s2_sink._exactly_once.shape import WriteShape, check_restart
from s2_sink._exactly_once.takeover import check_not_lost, check_not_renamed
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.retry import Patience, patiently
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config
from s2_sink.errors import CommitError

__all__ = ["SinkRun", "commit_sink_run", "open_sink_run"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SinkRun:
    """One micro-batch execution's exactly-once context, planned on the driver; pickles to the tasks."""

    cfg: S2Config
    writer_id: str
    query_id: str | None
    """The streaming query id the driver read from the checkpoint (None where it cannot read it)."""
    run: str
    epoch: int
    before: LedgerState
    """The ledger as this execution found it: its last commit, and whether an epoch since may have written
    (without its stream ends: `ends` carries them)."""
    ends: EndsRef
    """The last commit's stream ends as the tasks get them (`EndsRef`)."""
    opened: LedgerState
    """This execution's ``open`` or ``intent`` record (without its stream ends), and the ledger's tail
    after it: commit appends on top of them."""
    opened_tail: int
    trust_partitioning: bool = False
    """A replay keeps the partitioning of the run it repairs (``s2.replay-partitioning=same``)."""

    @property
    def recovery(self) -> bool:
        """An earlier execution may have written part of the micro-batch after the last commit."""
        return self.before.may_have_written_next

    def plan_batch(self, batch_id: int, query_id: str | None) -> EpochPlan | None:
        """How a task writes micro-batch `batch_id` in this execution's epoch, or None when the ledger
        already has the batch.

        `query_id` is the streaming query id the task sees (the ``sql.streaming.queryId`` property).
        """
        if self.query_id is not None and query_id is not None and query_id != self.query_id:
            raise CommitError(
                f"exactly-once: the driver read query id {self.query_id!r} from the checkpoint, but the "
                f"task runs for query {query_id!r}: the checkpointLocation option does not name this "
                "query's checkpoint; set option s2.writer-id to name the writer explicitly"
            )
        check_identity(self.before, self.writer_id, query_id, batch_id)
        if self.before.kind != "none" and batch_id > self.before.committed + 1:
            # Each execution's epoch is opened (when Spark pickles the writer) for the batch after the
            # ledger's last commit; a task of a later batch means the writer was shipped without a new
            # pickling, and its epoch and read-back starts belong to an earlier batch.
            raise CommitError(
                f"exactly-once: the task writes micro-batch {batch_id} under epoch {self.epoch}, opened "
                f"for batch {self.before.committed + 1} (writer_id {self.writer_id!r}): this Spark ships "
                "the streaming writer without pickling it for every micro-batch, or the ledger's batches "
                "do not follow the checkpoint's (a checkpoint from elsewhere: set a new s2.writer-id). "
                "Set s2.delivery=at-least-once, or write with foreachBatch(S2Writer(...))"
            )
        if already_committed(self.before, self.writer_id, batch_id):
            return None
        return epoch_plan(
            self.cfg,
            writer_hash(self.writer_id),
            self.epoch,
            self.ends,
            recovery=self.recovery,
            writer_id=self.writer_id,
            replay="partition" if self.trust_partitioning else "partition-checked",
        )


# Per (basin endpoint, basin, writer id, query id): the execution this process planned last. Spark's
# driver-side Python worker that pickles the writer is reused from micro-batch to micro-batch (not always
# the same one), so its next planning can often continue the epoch instead of opening one.
_planned: dict[tuple[str, str, str, str | None], SinkRun] = {}


def open_sink_run(
    cfg: S2Config,
    writer_id: str,
    query_id: str | None,
    static_streams: Sequence[str],
    *,
    trust_partitioning: bool = False,
    shape: WriteShape | None = None,
) -> SinkRun:
    """Plan one micro-batch execution: continue this process's epoch with an ``intent`` when its last
    execution committed and nothing was appended since, else open a new epoch (static streams fenced).
    `shape` is what the writer's options make of a row: recorded with the announcement, and checked
    against the ledger's when the batch is in flight (`shape.check_restart`)."""

    def check(before: LedgerState) -> None:
        """The query id where the driver knows it (the tasks check it too, `check_identity`), and what
        this execution's options change against the ledger's (`shape.check_restart`)."""
        if query_id is not None and before.query_id not in (None, query_id):
            check_identity(before, writer_id, query_id, before.committed + 1)
        if shape is not None:
            at = before.committed + 1  # the micro-batch this execution announces
            in_flight = at if before.may_have_written_next else None
            check_restart(before.shapes, shape, at=at, in_flight=in_flight, writer_id=writer_id)

    async def plan(last: SinkRun | None) -> tuple[SinkRun, bool]:
        """The execution's run, and whether it continues `last`'s epoch."""
        if last is not None:
            ledger = Ledger(get_pool().client(cfg).basin(cfg.basin), writer_id, cfg=cfg)
            before = await ledger.load()
            if before.kind == "commit" and (before.run, before.epoch) == (last.run, last.epoch):
                # The execution this process planned last committed, and nothing was appended since: every
                # writer of this epoch is a task of an execution that committed (its zombies meet the task
                # retry's generation barrier, as S2Writer's across the batches of a run). Announce the next
                # batch under a fresh execution id, so the ledger shows whether *this* execution committed.
                check(before)
                plan_id = uuid.uuid4().hex
                ends = EndsRef.of(writer_id, before, state_at=ledger.state_at, keep=static_streams)
                await ledger.append(replace(ledger.intended(before.committed + 1, shape), run=plan_id))
                assert ledger.tail is not None
                opened = ledger.state
                return SinkRun(
                    cfg, writer_id, query_id, plan_id, last.epoch, before, ends, opened, ledger.tail
                ), True
        # A new epoch: its ``open`` record announces the batch after the last commit. Its scope stays
        # ``batch``: each of its batches is announced by the record right before it, so a commit leaves
        # nothing in flight (docs/exactly-once.md, format("s2")).
        coord = Coordinator(cfg, writer_id, query_id=query_id, static_streams=static_streams)
        before = await coord.load()
        if before.kind == "none":  # a new writer, a renamed one (refused), or one whose ledger was deleted
            basin = get_pool().client(cfg).basin(cfg.basin)
            await check_not_renamed(basin, writer_id, query_id, cfg=cfg)
            what = f"listing the sign-in registers of {writer_id!r}"
            await patiently(Patience.of(cfg), what, lambda: check_not_lost(basin, writer_id))
        check(before)
        ends = coord.ends_ref()  # before the open record: the ends at the state record this driver loaded
        token = await coord.open_run("batch", announce=shape)
        opened, tail = coord.ledger_position()
        return SinkRun(cfg, writer_id, query_id, coord.run_id, token.epoch, before, ends, opened, tail), False

    key = (cfg.basin_endpoint, cfg.basin, writer_id, query_id)
    last = _planned.pop(key, None)  # a failure below leaves no entry: the next planning opens an epoch
    run, reused = _runtime.run(plan(last))
    run = _shipped(replace(run, trust_partitioning=trust_partitioning))
    _planned[key] = run
    log.info(
        "exactly-once: writer %s %s execution %s epoch %s after batch %s (recovery=%s)",
        writer_id,
        "continued" if reused else "opened",
        run.run,
        run.epoch,
        run.before.committed,
        run.recovery,
    )
    return run


# Per execution id: the full state of its ``open`` or ``intent`` record (with the stream ends the run
# shipped to the tasks leaves out), for the commit when it runs in the process that planned the execution.
_opened: dict[str, LedgerState] = {}
_OPENED_KEEP = 8


def _shipped(run: SinkRun) -> SinkRun:
    """`run` as Spark pickles it to every task: ledger states without their stream ends (`run.ends` has
    them the way `S2Writer`'s plans do), so its size does not grow with the streams ever committed."""
    _opened[run.run] = run.opened
    while len(_opened) > _OPENED_KEEP:
        del _opened[next(iter(_opened))]
    return replace(run, before=replace(run.before, ends={}), opened=replace(run.opened, ends={}))


def commit_sink_run(
    cfg: S2Config,
    writer_id: str,
    run: SinkRun | None,
    batch_id: int,
    ends: Mapping[str, int],
    *,
    query_id: str | None = None,
    shape: WriteShape | None = None,
) -> None:
    """Record `batch_id` in the ledger on top of execution `run`'s ``open`` (None: no task reported);
    `query_id` is the streaming query id the tasks saw, `shape` what the options make of a row."""

    async def commit() -> None:
        ledger = Ledger(get_pool().client(cfg).basin(cfg.basin), writer_id, cfg=cfg)
        if run is not None:
            # Happy path: one conditional append on top of our own open record. If anybody appended since,
            # the append fails and Ledger.append names the other run (WriterConflictError).
            opened = _opened.get(run.run)
            if opened is None:  # committed in another process than the planning: read the ends back
                seen = await ledger.peek()  # never creates a ledger deleted since: the append then fails
                # A ledger appended to since fails the conditional append below, whatever the state read.
                opened = seen[1] if seen is not None and seen[0] == run.opened_tail else run.opened
            ledger.resume(opened, run.opened_tail)
            committed = max(batch_id, run.before.committed)
        else:
            state = await ledger.load()  # no task reported: commit on top of whatever opened this batch
            if state.kind == "commit" and state.committed >= batch_id:
                return
            committed = max(batch_id, state.committed)
        # A batch the ledger had (every task skipped it) is committed again: it closes this execution's epoch.
        await ledger.append(ledger.committed(committed, dict(ends), query_id, shape))
        log.info(
            "exactly-once: writer %s committed batch %s (%s)", writer_id, batch_id, run.run if run else "-"
        )

    _crashpoints.hit("after_tasks_before_commit", batch=batch_id)
    _runtime.run(commit())
    _crashpoints.hit("after_commit_before_spark_commit", batch=batch_id)
