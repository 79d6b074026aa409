"""The exactly-once delivery mode of `S2Writer` (``delivery="exactly-once"``, the default).

It plugs into the writer's two driver-side steps:

- ``prepare``: refuse speculative execution; resolve the writer identity (``writer_id``, else the
  streaming query id and the destination); ask the ledger whether the batch is already committed (then
  write nothing); otherwise plan the batch under the run's epoch (`plan.epoch_plan`: fencing token, chunk
  tagger, token keeper, dedupe hook, ``NO_SIDE_EFFECTS`` retries) and — for the replay of a batch a
  previous run may have partly written — mark the job for a recovery layout: `S2Writer` repartitions the
  record frame by record content (`repartition_for_recovery`) so every copy of a record is written by one
  task, and hands the layout back with `BatchJob.laid_out`.

It reads the session only through `SessionFacts` (plain values, read by `identity.session_facts`), and never
touches the frame: the Spark steps stay in `S2Writer`, and the simulation (tests/sim) drives this very
object without a JVM.
- ``commit``: append the batch's ``commit`` record (with the streams' end positions) to the ledger.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import TYPE_CHECKING, Any

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.identity import SessionFacts, speculation_refused, writer_identity
from s2_sink._write.driver.delivery import BatchJob
from s2_sink.errors import ConfigError

if TYPE_CHECKING:
    from s2_sink._write.driver.metrics import BatchMetrics
    from s2_sink._write.spec import WriteSpec

__all__ = ["ExactlyOnce"]

log = logging.getLogger(__name__)

# Which live ExactlyOnce object last began each identity's micro-batches in this process, and in which start
# of the query: two S2Writer objects with one destination in one foreachBatch share an identity, and the
# second would find the first one's commit and skip its batch.
_claims: weakref.WeakValueDictionary[tuple[str, str], ExactlyOnce] = weakref.WeakValueDictionary()
_claims_lock = threading.Lock()


class ExactlyOnce:
    """Ledger-committed, fenced, tag-and-subtract delivery (see docs/exactly-once.md).

    One coordinator per identity: a writer object shared by two queries keeps each query's ledger, epoch
    and commits apart (the job carries the coordinator that planned it to its commit).
    """

    name = "exactly-once"

    def __init__(self, spec: WriteSpec) -> None:
        self.spec = spec
        self._coords: dict[tuple[str, str | None], Coordinator] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # SDK clients do not pickle; a deserialized copy (Spark Connect) re-reads the ledger on first use.
        return {"spec": self.spec}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"])  # type: ignore[misc]

    def prepare(self, batch_id: int, session: SessionFacts | None) -> BatchJob | None:
        """The exactly-once job for this micro-batch, or ``None`` if the ledger already has it; a replay's
        job asks for a recovery layout (`BatchJob.recovery_layout`)."""
        if session is None:
            raise TypeError("exactly-once prepares a batch with the session's facts (identity.session_facts)")
        if session.speculation:
            raise speculation_refused()
        ident = writer_identity(self.spec.writer_id, session.query_id, self.spec.destination())
        with self._lock:
            coord = self._coords.get((ident.writer_id, ident.query_id))
            if coord is None:
                coord = Coordinator(
                    self.spec.cfg,
                    ident.writer_id,
                    query_id=ident.query_id,
                    static_streams=self.spec.static_streams(),
                    destination=self.spec.destination(),
                    predecessor=ident.predecessor,
                )
                coord.one_start_per_process = session.connect
                self._coords[(ident.writer_id, ident.query_id)] = coord
        self._claim(coord, batch_id, session.run_id)
        epoch = coord.begin_batch(batch_id, session.run_id)
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
            return BatchJob(batch_id, plan, coord, recovery_layout=True)
        return BatchJob(batch_id, plan, coord)

    def _claim(self, coord: Coordinator, batch_id: int, spark_run: str | None) -> None:
        """Refuse a second writer object that begins a batch another live one began in the same start."""
        if spark_run is None and not coord.one_start_per_process:
            return  # classic Spark without a readable run id: another object may be a restart's
        key = (self.spec.cfg.basin, coord.writer_id)
        with _claims_lock:
            holder = _claims.get(key)
            if holder is not None and holder is not self:
                other = holder._coords.get((coord.writer_id, coord.query_id))
                if other is not None and other.began(batch_id, spark_run):
                    raise ConfigError(
                        f"two S2Writer objects write micro-batch {batch_id} to {self.spec.destination()} "
                        f"under one exactly-once identity ({coord.writer_id!r}): the second would find the "
                        "batch committed and skip it. Use one S2Writer per target, give each its own "
                        "writer_id, or union the frames into one write"
                    )
            _claims[key] = self

    def commit(self, job: BatchJob, metrics: BatchMetrics) -> None:
        """Record the batch in the ledger of the identity that planned it (one conditional append)."""
        coord = job.coord
        assert isinstance(coord, Coordinator)
        coord.commit_batch(job.batch_id, metrics.end_positions())
        coord.remember_tokens(metrics.stream_tokens())
