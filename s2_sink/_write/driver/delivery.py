"""How `S2Writer` plans and commits a micro-batch: the `DeliveryMode` protocol, at-least-once, and
exactly-once (``delivery="exactly-once"``, the default). Both modes are built from the `WriteSpec` alone,
plain picklable values, so they never depend on the writer that drives them.

Exactly-once plugs into the writer's two driver-side steps:

- ``prepare``: refuse speculative execution; resolve the writer identity (``writer_id``, else the
  streaming query id: no configuration in it, see `identity`); refuse a second writer object under that
  identity in the same micro-batch (`_claim`: a query's writers are told apart by their ``writer_id``); ask
  the ledger whether the batch is already committed (then write nothing); otherwise plan the batch under the
  run's epoch (`plan.epoch_plan`: fencing token, chunk tagger, token keeper, dedupe hook, ``NO_SIDE_EFFECTS``
  retries) and — for the replay of a batch a previous run may have partly written — mark the job for a
  recovery layout: `S2Writer` lays the record frame out by record content (`writer.laid_out`, by the
  placement keys of a `RecoveryLayout`) so every copy of a record is written by one task, and hands the
  layout back with `BatchJob.laid_out`.
- ``commit``: append the batch's ``commit`` record (with the streams' end positions) to the ledger.

It reads the session only through `SessionFacts` (plain values, read by `identity.session_facts`), and never
touches the frame: the Spark steps stay in `S2Writer`, and the simulation (tests/sim) drives this very
object without a JVM.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.epoch_plan import plan_with_layout
from s2_sink._exactly_once.identity import SessionFacts, speculation_refused, writer_identity
from s2_sink.errors import ConfigError

if TYPE_CHECKING:
    from s2_sink._exactly_once.recovery_layout import RecoveryLayout
    from s2_sink._exactly_once.shape import WriteShape
    from s2_sink._write.driver.metrics import BatchMetrics
    from s2_sink._write.spec import WriteSpec
    from s2_sink._write.write_plan import WritePlan
    from s2_sink.config import S2Config

__all__ = ["AtLeastOnce", "BatchJob", "DeliveryMode", "ExactlyOnce"]

log = logging.getLogger(__name__)


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


@dataclass(frozen=True, slots=True)
class _Claim:
    """A micro-batch begun under an identity in this process: by which coordinator (one per writer object
    and identity), for which query, in which start of it (Spark's run id; None where unreadable)."""

    owner: str
    query_id: str | None
    start: str | None
    batch: int
    routing: str


# Per (endpoint, basin, writer id): the micro-batch last begun under that identity in this process. Another
# coordinator (another writer object) beginning the same micro-batch of the same start under one identity
# is a second writer of the query without a writer_id of its own: it would share the first one's ledger
# and find the batch committed. And an identity another writer object writes under in this start is never
# a predecessor to take over (`Coordinator.in_use`). Records, not references: a writer object made and
# dropped inside the function (``S2Writer(cfg)(df, batch_id)``) is still seen.
_claims: dict[tuple[str, str, str], _Claim] = {}
_claims_lock = threading.Lock()


class ExactlyOnce:
    """Ledger-committed, fenced, tag-and-subtract delivery (see docs/exactly-once.md).

    One coordinator per identity: a writer object shared by two queries keeps each query's ledger, epoch
    and commits apart (the job carries the coordinator that planned it to its commit).
    """

    name = "exactly-once"

    def __init__(self, spec: WriteSpec, shape: WriteShape | None = None) -> None:
        self.spec = spec
        self.shape = shape
        """What the writer's configuration makes of a row (recorded in the ledger, checked at restarts)."""
        self._coords: dict[tuple[str, str | None], Coordinator] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # SDK clients do not pickle; a deserialized copy (Spark Connect) re-reads the ledger on first use.
        return {"spec": self.spec, "shape": self.shape}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["spec"], state.get("shape"))  # type: ignore[misc]

    def prepare(self, batch_id: int, session: SessionFacts | None) -> BatchJob | None:
        """The exactly-once job for this micro-batch, or ``None`` if the ledger already has it; a replay's
        job asks for a recovery layout (`BatchJob.recovery_layout`)."""
        if session is None:
            raise TypeError("exactly-once prepares a batch with the session's facts (identity.session_facts)")
        if session.speculation:
            raise speculation_refused()
        writer_id, query_id = writer_identity(self.spec.writer_id, session.query_id)
        with self._lock:
            coord = self._coords.get((writer_id, query_id))
            if coord is None:
                coord = Coordinator(
                    self.spec.cfg,
                    writer_id,
                    query_id=query_id,
                    static_streams=self.spec.static_streams(),
                    shape=self.shape,
                )
                self._coords[(writer_id, query_id)] = coord
        coord.in_use = partial(
            _in_use, cfg=self.spec.cfg, owner=coord.owner, query_id=query_id, connect=session.connect
        )
        if session.connect:
            coord.unknown_run = "Spark Connect does not expose the streaming query's run id"
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
        """Refuse a second writer object that begins a micro-batch another one began in the same start
        under the same identity (where the start cannot be told, in any: fail closed)."""
        routing = self.spec.shape(None).routing
        with _claims_lock:
            held = _claims.get(_claim_key(self.spec.cfg, coord.writer_id))
            if (
                held is not None
                and held.owner != coord.owner
                and (held.query_id, held.start, held.batch) == (coord.query_id, spark_run, batch_id)
            ):
                raise self._second_writer(coord, held.routing, batch_id, spark_run)
            _claims[_claim_key(self.spec.cfg, coord.writer_id)] = _Claim(
                coord.owner, coord.query_id, spark_run, batch_id, routing
            )

    def _second_writer(
        self, coord: Coordinator, theirs: str, batch_id: int, spark_run: str | None
    ) -> ConfigError:
        mine = self.spec.shape(None).routing
        if self.spec.writer_id is None:
            who = f"under the query's default exactly-once identity, its query id {coord.writer_id!r}"
        else:
            who = f"under one writer_id, {coord.writer_id!r}"
        restart = ""
        if spark_run is None and not coord.unknown_run.startswith("Spark Connect"):
            restart = (
                f" ({coord.unknown_run}, so a restart of the query in this process with a new S2Writer "
                "looks the same: if that is what this is, restart it in a new Python process, where the new "
                "S2Writer starts from its ledger)"
            )
        return ConfigError(
            f"two S2Writer objects write micro-batch {batch_id} of the streaming query {who} (one writes "
            f"{theirs}, this one {mine}); sharing one ledger, the second would find the batch committed and "
            f"skip it, so nothing of this one's frame was written{restart}. A query's writers are told apart "
            "by their writer_id: give each S2Writer a writer_id of its own, kept across restarts (one per "
            "target; the writer that wrote this query's batches so far then goes on from its ledger), or "
            "union the frames into one write"
        )

    def commit(self, job: BatchJob, metrics: BatchMetrics) -> None:
        """Record the batch in the ledger of the identity that planned it (one conditional append)."""
        coord = job.coord
        assert isinstance(coord, Coordinator)
        coord.commit_batch(job.batch_id, metrics.end_positions())
        coord.remember_tokens(metrics.stream_tokens())


def _in_use(
    writer_id: str, spark_run: str | None, *, cfg: S2Config, owner: str, query_id: str | None, connect: bool
) -> bool:
    """`Coordinator.in_use` of one writer object (`owner`): whether another writer object of this process
    writes under `writer_id` in this start of the query. Without a run id a start is one process under Spark
    Connect; in classic Spark it cannot be told (another object may be a previous start's): no, and the
    take-over decides on evidence or refuses."""
    if spark_run is None and not connect:
        return False
    with _claims_lock:
        held = _claims.get(_claim_key(cfg, writer_id))
    return held is not None and held.owner != owner and (held.query_id, held.start) == (query_id, spark_run)


def _claim_key(cfg: S2Config, writer_id: str) -> tuple[str, str, str]:
    return (cfg.basin_endpoint or "", cfg.basin, writer_id)
