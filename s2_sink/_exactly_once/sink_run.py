"""Exactly-once for ``df.writeStream.format("s2")``: one fencing epoch per run of clean micro-batches.

No driver step knows the batch id before the tasks run: the epoch opens when the writer is pickled
(`open_sink_run`), tasks plan their batch (`SinkRun.plan_batch`), ``commit`` closes it (`commit_sink_run`)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from s2_sink._exactly_once.coordinator import Coordinator, check_identity, commit_ledger
from s2_sink._exactly_once.ends_cache import EndsRef
from s2_sink._exactly_once.epoch_plan import EpochPlan, already_committed, epoch_plan
from s2_sink._exactly_once.ledger import Ledger, LedgerState
from s2_sink._exactly_once.shape import WriteShape
from s2_sink._transport import runtime as _runtime
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
    query_id: str | None  # read from the checkpoint (None where it cannot be)
    run: str
    epoch: int
    before: LedgerState  # the ledger as this execution found it (its ends are in `ends`)
    ends: EndsRef
    opened: LedgerState  # this execution's ``open`` or ``intent``, and the tail after it: commit goes on top
    opened_tail: int
    writer: str  # `Coordinator.writer`
    trust_partitioning: bool = False  # s2.replay-partitioning=same

    @property
    def recovery(self) -> bool:
        return self.before.may_have_written_next

    def plan_batch(self, batch_id: int, query_id: str | None) -> EpochPlan | None:
        """How a task of query `query_id` writes `batch_id` in this epoch; None when the ledger has it."""
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
            self.writer,
            self.epoch,
            self.ends,
            recovery=self.recovery,
            writer_id=self.writer_id,
            replay="partition" if self.trust_partitioning else "partition-checked",
        )


# Per (basin endpoint, basin, writer id, query id): the coordinator of the execution this process planned
# last. Spark's driver-side Python worker that pickles the writer is reused from micro-batch to micro-batch
# (not always the same one), so its next planning can often continue the epoch instead of opening one.
_planned: dict[tuple[str, str, str, str | None], Coordinator] = {}


def open_sink_run(
    cfg: S2Config,
    writer_id: str,
    query_id: str | None,
    static_streams: Sequence[str],
    *,
    trust_partitioning: bool = False,
    shape: WriteShape | None = None,
) -> SinkRun:
    """Plan one micro-batch execution (`Coordinator.plan_execution`)."""
    key = (cfg.basin_endpoint, cfg.basin, writer_id, query_id)
    # A failure below leaves no entry: the next planning opens an epoch.
    coord = _planned.pop(key, None)
    if coord is None or coord.cfg != cfg:  # a restart may change the options (streams, token, retries)
        coord = Coordinator(cfg, writer_id, query_id=query_id)
    coord.shape, coord.static_streams = shape, list(static_streams)
    before, ends, continued = _runtime.run(coord.plan_execution())
    opened, tail = coord.ledger_position()
    # Pickled to every task: states without their ends (`ends` has them), so it does not grow with streams.
    run = SinkRun(
        cfg,
        writer_id,
        query_id,
        coord.run_id,
        coord.epoch,
        replace(before, ends={}),
        ends,
        replace(opened, ends={}),
        tail,
        coord.writer,
        trust_partitioning,
    )
    _planned[key] = coord
    log.info(
        "exactly-once: writer %s %s execution %s epoch %s after batch %s (recovery=%s)",
        writer_id,
        "continued" if continued else "opened",
        run.run,
        run.epoch,
        before.committed,
        run.recovery,
    )
    return run


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
    """Record `batch_id` on top of execution `run`'s ``open`` or ``intent`` (None: no task reported)."""

    async def place(ledger: Ledger) -> int | None:
        if run is None:
            state = await ledger.load()  # no task reported: commit on top of whatever opened this batch
            done = state.kind == "commit" and state.committed >= batch_id
            return None if done else max(batch_id, state.committed)
        # In the process that planned it, its state with the ends; else they are read back.
        planned = [c.ledger_position() for c in _planned.values() if c.run_id == run.run]
        if planned and planned[0][1] == run.opened_tail:
            opened = planned[0][0]
        else:
            seen = await ledger.peek()  # never creates a ledger deleted since: the append then fails
            # A ledger appended to since fails the conditional append, whatever the state read.
            opened = seen[1] if seen is not None and seen[0] == run.opened_tail else run.opened
        ledger.resume(opened, run.opened_tail)
        # A batch the ledger had (every task skipped it) is committed again: it closes this execution's epoch.
        return max(batch_id, run.before.committed)

    ledger = Ledger(get_pool().client(cfg).basin(cfg.basin), writer_id, cfg=cfg)
    commit_ledger(ledger, batch_id, ends, query_id, shape, place=place)
