"""Micro-batches through `S2Writer`'s own exactly-once delivery mode without Spark, as `S2Writer.__call__`
drives it: `mode.prepare` with the session's facts, every partition's task (`write_partition`), then
`mode.commit`; a replay is laid out by content in one task (which owns every content). The frames are
record frames (``encoder=None``) built by the simulation's `frame_of`."""

from __future__ import annotations

from collections import Counter
from itertools import count
from typing import Any

from s2_sink._exactly_once.identity import SessionFacts
from s2_sink._exactly_once.ledger import Ledger, LedgerState
from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext
from s2_sink.config import S2Config
from s2_sink.lite import LiteServer
from s2_sink.writer import S2Writer
from tests.faults._support import read_all, run
from tests.sim._scenario import Row, frame_of

__all__ = ["bodies", "facts", "ledger_state", "write_batch", "write_tasks"]

_task_ids = count(10_000)


def facts(run_id: str | None = "run-1", query_id: str | None = "q1") -> SessionFacts:
    """The facts of a ``foreachBatch`` call in classic Spark (run id None: unreadable)."""
    return SessionFacts(query_id, run_id)


def write_tasks(writer: S2Writer, job: Any, batch: int, parts: list[list[Row]]) -> list[dict[str, Any]]:
    """Each partition of `parts` written by a task of `job` (its result rows)."""
    rows: list[dict[str, Any]] = []
    for p, part in enumerate(parts):
        frame = frame_of(part, routed=writer.routing.routed, dlq=True, payload=writer.on_error == "dlq")
        ctx = PartitionContext(batch, p, 0, next(_task_ids), 1)
        rows += write_partition(job.plan, [frame], ctx).to_pylist()
    return rows


def write_batch(writer: S2Writer, batch: int, parts: list[list[Row]], session: SessionFacts) -> str:
    """One micro-batch: ``"skipped"`` when the ledger has it, ``"recovered"`` for a replay, else
    ``"written"``; a task's error propagates (the batch stays uncommitted)."""
    job = writer.mode.prepare(batch, session)
    if job is None:
        return "skipped"
    writer._create_known_streams()
    if job.recovery_layout:
        job = job.laid_out(RecoveryLayout(1, routed=writer.routing.routed))
        parts = [[r for p in parts for r in p]]
    rows = write_tasks(writer, job, batch, parts)
    writer.mode.commit(job, aggregate(batch, rows, 0.0, delivery="exactly-once"))
    return "recovered" if job.plan.fixed_layout else "written"


def bodies(lite: LiteServer, basin: str, stream: str) -> Counter[bytes]:
    """The bodies of the data records in `stream`."""
    return Counter(bytes(r.body) for r in run(read_all(lite.endpoint, basin, stream)))


def ledger_state(cfg: S2Config, writer_id: str) -> LedgerState:
    """The state of `writer_id`'s ledger (created if missing)."""

    async def go() -> LedgerState:
        return await Ledger(get_pool().client(cfg).basin(cfg.basin), writer_id, cfg=cfg).load()

    return _runtime.run(go())
