"""How `S2Writer` plans and commits a micro-batch: the `DeliveryMode` protocol and at-least-once.

Exactly-once (`s2_sink._write.driver.exactly_once`) implements the same protocol. Both are built from the
`WriteSpec` alone, plain picklable values, so they never depend on the writer that drives them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from s2_sink._write.driver.metrics import BatchMetrics
    from s2_sink._write.plan import WritePlan
    from s2_sink._write.spec import WriteSpec

__all__ = ["AtLeastOnce", "BatchJob", "DeliveryMode"]


@dataclass(frozen=True, slots=True)
class BatchJob:
    """One micro-batch as the delivery mode planned it: the frame to write and the plan to write it with."""

    batch_id: int
    frame: DataFrame
    plan: WritePlan
    coord: object | None = None
    """The delivery mode's own handle on the batch (exactly-once: the coordinator that planned it)."""


class DeliveryMode(Protocol):
    """How a micro-batch is planned and committed.

    ``prepare`` runs on the driver before the write job and returns the job to run (possibly with a
    frame repartitioned into `tasks` partitions), or ``None`` when the batch must not be written again
    (already committed).
    ``commit`` runs after every task succeeded, with the aggregated metrics. Both may raise `S2SinkError`
    subclasses; they run in the ``foreachBatch`` caller's process.
    """

    name: str

    def prepare(self, batch_id: int, frame: DataFrame, *, tasks: int) -> BatchJob | None: ...

    def commit(self, job: BatchJob, metrics: BatchMetrics) -> None: ...


class AtLeastOnce:
    """Every row is appended at least once; session and task retries may duplicate records."""

    name = "at-least-once"

    def __init__(self, spec: WriteSpec) -> None:
        self.spec = spec

    def prepare(self, batch_id: int, frame: DataFrame, *, tasks: int) -> BatchJob | None:
        """The frame as is, with the spec's at-least-once plan (`tasks` lays out replays only)."""
        return BatchJob(batch_id, frame, self.spec.plan(batch_id))

    def commit(self, job: BatchJob, metrics: BatchMetrics) -> None:
        """Nothing to record."""
