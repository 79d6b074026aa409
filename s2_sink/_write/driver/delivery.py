"""How `S2Writer` plans and commits a micro-batch: the `DeliveryMode` protocol and at-least-once.

Exactly-once (`s2_sink._write.driver.exactly_once`) implements the same protocol. Both are built from the
`WriteSpec` alone, plain picklable values, so they never depend on the writer that drives them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from s2_sink._exactly_once.task_hooks import plan_with_layout

if TYPE_CHECKING:
    from s2_sink._exactly_once.identity import SessionFacts
    from s2_sink._exactly_once.recovery_layout import RecoveryLayout
    from s2_sink._write.driver.metrics import BatchMetrics
    from s2_sink._write.spec import WriteSpec
    from s2_sink._write.write_plan import WritePlan

__all__ = ["AtLeastOnce", "BatchJob", "DeliveryMode"]


@dataclass(frozen=True, slots=True)
class BatchJob:
    """One micro-batch as the delivery mode planned it: the plan to write it with."""

    batch_id: int
    plan: WritePlan
    coord: object | None = None
    """The delivery mode's own handle on the batch (exactly-once: the coordinator that planned it)."""
    recovery_layout: bool = False
    """A replay: the caller lays the record frame out by record content (the placement keys of a
    `RecoveryLayout`) and writes with the job `laid_out` returns."""

    def laid_out(self, layout: RecoveryLayout) -> BatchJob:
        """This job once its frame is laid out by `layout`: tasks check and subtract by it."""
        return replace(self, plan=plan_with_layout(self.plan, layout), recovery_layout=False)


class DeliveryMode(Protocol):
    """How a micro-batch is planned and committed.

    ``prepare`` runs on the driver before the write job and returns the job to run (possibly asking for a
    recovery layout of the frame), or ``None`` when the batch must not be written again (already
    committed). It sees no DataFrame: only the session's facts (`SessionFacts`, None for a mode that needs
    none), so it runs without Spark.
    ``commit`` runs after every task succeeded, with the aggregated metrics. Both may raise `S2SinkError`
    subclasses; they run in the ``foreachBatch`` caller's process.
    """

    name: str

    def prepare(self, batch_id: int, session: SessionFacts | None) -> BatchJob | None: ...

    def commit(self, job: BatchJob, metrics: BatchMetrics) -> None: ...


class AtLeastOnce:
    """Every row is appended at least once; session and task retries may duplicate records."""

    name = "at-least-once"

    def __init__(self, spec: WriteSpec) -> None:
        self.spec = spec

    def prepare(self, batch_id: int, session: SessionFacts | None) -> BatchJob | None:
        """The spec's at-least-once plan (the session is not read)."""
        return BatchJob(batch_id, self.spec.plan(batch_id))

    def commit(self, job: BatchJob, metrics: BatchMetrics) -> None:
        """Nothing to record."""
