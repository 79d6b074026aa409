"""The exactly-once delivery mode of `S2Writer` (``delivery="exactly-once"``, the default).

It plugs into the writer's two driver-side steps:

- ``prepare``: refuse speculative execution; resolve the writer identity (``writer_id``, else the
  streaming query id); ask the ledger whether the batch is already committed (then write nothing);
  otherwise plan the batch under the run's epoch (`plan.epoch_plan`: fencing token, chunk tagger, token
  keeper, dedupe hook, ``NO_SIDE_EFFECTS`` retries) and — for the replay of a batch a previous run may
  have partly written — repartition the record frame by record content so every copy of a record is
  written by one task.
- ``commit``: append the batch's ``commit`` record (with the streams' end positions) to the ledger.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.identity import check_no_speculation, query_run_id, resolve_identity
from s2_sink._exactly_once.recovery_layout import repartition_for_recovery
from s2_sink._exactly_once.task import plan_with_layout
from s2_sink._write.driver.delivery import BatchJob

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from s2_sink._write.driver.metrics import BatchMetrics
    from s2_sink._write.spec import WriteSpec

__all__ = ["ExactlyOnce"]

log = logging.getLogger(__name__)


class ExactlyOnce:
    """Ledger-committed, fenced, tag-and-subtract delivery (see docs/exactly-once.md)."""

    name = "exactly-once"

    def __init__(self, spec: WriteSpec) -> None:
        self.spec = spec
        self._coord: Coordinator | None = None

    def __getstate__(self) -> dict[str, Any]:
        # SDK clients do not pickle; a deserialized copy (Spark Connect) re-reads the ledger on first use.
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.spec = state["spec"]
        self._coord = None

    def prepare(self, batch_id: int, frame: DataFrame, *, tasks: int) -> BatchJob | None:
        """The exactly-once job for this micro-batch, or ``None`` if the ledger already has it; a replay
        is laid out in `tasks` partitions."""
        spark = frame.sparkSession
        check_no_speculation(spark)
        writer_id, query_id = resolve_identity(self.spec.writer_id, spark)
        if self._coord is None or (self._coord.writer_id, self._coord.query_id) != (writer_id, query_id):
            # First batch, or the same writer object now serves another query (a new checkpoint).
            self._coord = Coordinator(
                self.spec.cfg,
                writer_id,
                query_id=query_id,
                static_streams=self.spec.static_streams(),
            )
        epoch = self._coord.begin_batch(batch_id, query_run_id(spark))
        if epoch is None:
            return None
        plan = self.spec.plan(batch_id, epoch)
        if epoch.recovery:
            log.warning(
                "exactly-once: batch %s replays after a driver restart; writing it in recovery mode "
                "(repartitioned by record content, read back and subtracted)",
                batch_id,
            )
            # By exactly what the fingerprint covers, so all copies of a record are in one task.
            frame, layout = repartition_for_recovery(frame, tasks)
            plan = plan_with_layout(plan, layout)
        return BatchJob(batch_id, frame, plan)

    def commit(self, job: BatchJob, metrics: BatchMetrics) -> None:
        """Record the batch in the ledger (one conditional append)."""
        assert self._coord is not None
        self._coord.commit_batch(job.batch_id, metrics.end_positions())
