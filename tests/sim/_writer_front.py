"""``foreachBatch`` around a real `S2Writer`, as the simulated query's driver runs it (`WriterFront`, a part
of `tests.sim._spark.Query`): per micro-batch, what ``S2Writer.__call__`` does around the Spark job —
``writer.mode.prepare`` with the facts `session_facts` reads off the modelled session, stream creation, the
recovery layout a replay asks for (its Python twin), ``writer.mode.commit`` with the aggregated result rows —
the job itself modelled by the query's stages. In ``several-writers`` the function calls a second writer."""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from s2_sink._exactly_once.identity import SessionFacts, session_facts
from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.spec import Delivery
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.encoders._change_order import in_change_order, last_changes
from s2_sink.encoders._frame import ERROR, KEY
from s2_sink.writer import S2Writer
from tests.sim._partitioning import by_content, by_stream_order, spark_sorted, split
from tests.sim._scenario import DLQ_STREAM, MIRROR_STREAM, MIRROR_WRITER, Row, Scenario, frame_of, key_of
from tests.sim._session import Session

if TYPE_CHECKING:
    from tests.sim._changes import RunConfig
    from tests.sim._scheduler import Scheduler

__all__ = ["WriterFront"]


class WriterFront:
    """The ``foreachBatch`` driver steps of `tests.sim._spark.Query` (which provides the attributes and the
    stage, commit and note methods declared here)."""

    sc: Scenario
    cfg: S2Config
    delivery: Delivery
    sched: Scheduler
    query_id: str
    prefix: str
    writer: S2Writer | None
    second: S2Writer | None
    writer_name: str | None
    config: RunConfig | None
    second_first: bool

    def _note(self, text: str) -> None:
        raise NotImplementedError

    def _stage(
        self,
        run: int,
        batch: int,
        parts: list[list[Row]],
        body: Callable[[list[Row], PartitionContext], Any],
        calm: bool,
    ) -> list[Any]:
        raise NotImplementedError

    def _committed(self, batch: int) -> None:
        raise NotImplementedError

    def _spark_commit(self, batch: int) -> None:
        raise NotImplementedError

    def _reset_point(self, run: int, batch: int, *, spark_committed: bool) -> None:
        raise NotImplementedError

    def _new_writer(self) -> S2Writer:
        """The ``S2Writer`` a ``foreachBatch`` query is started with (no preflight: the first batch's
        ``_create_known_streams`` and the ledger create what the schedule needs)."""
        return self._writer_named(self.writer_name)

    def _writer_named(self, writer_id: str | None) -> S2Writer:
        sc = self.sc
        if self.config is not None:  # changed: the configuration of this start
            return S2Writer(
                self.cfg, None, writer_id=writer_id, preflight=False, **self.config.writer_kwargs()
            )
        return S2Writer(
            self.cfg,
            None,  # the batches are record frames already
            stream_column="target" if sc.routed and not sc.shards else None,
            shards=sc.shards,
            on_error="dlq" if sc.dlq else "fail",
            dlq_stream=DLQ_STREAM if sc.dlq else None,
            delivery=self.delivery,
            writer_id=writer_id,
            preflight=False,
        )

    def _second_writer(self) -> S2Writer | None:
        """``several-writers``: what the ``foreachBatch`` function calls after the query's writer: an
        `S2Writer` to another destination (`MIRROR_STREAM`, bad rows skipped; ``named-writers``: without a
        ``writer_id`` until the user names it), the same object again, or another object with the same
        destination."""
        second = self.sc.second
        if second in ("mirror", "unnamed mirror"):
            named = second == "mirror" or self.writer_name is not None
            return S2Writer(
                self.cfg.replace(stream=MIRROR_STREAM),
                None,
                on_error="skip" if self.sc.dlq else "fail",
                delivery=self.delivery,
                writer_id=MIRROR_WRITER if named else None,
                preflight=False,
            )
        if second == "same object":
            return self.writer
        return self._new_writer() if second == "same destination" else None

    def _writer_run(self, run: int, calm: bool, own: S2Writer | None = None) -> None:
        """A start of ``foreachBatch(f)``: `f` calls one `S2Writer` (in ``several-writers``, two; the mirror
        writer first where ``named-writers`` says so). `own`: a driver with a writer object of its own
        (``two-drivers``)."""
        if own is None and self.writer is None:
            self.writer = self._new_writer()
            self.second = self._second_writer()
        writer = own or self.writer
        assert writer is not None
        second = None if own is not None else self.second
        session = Session(self.query_id, f"{self.prefix}run-{run}", self.sc.run_id_known)
        facts = session_facts(session) if writer.spec.exactly_once else None
        for b in range(self.spark_committed + 1, len(self.sc.batches)):
            calls = [writer] if second is None else [writer, second]
            if self.second_first:
                calls.reverse()
            for i, w in enumerate(calls):
                if i:
                    if self.sc.second not in ("mirror", "unnamed mirror"):
                        self._committed(b)  # this batch's records are all written; the second call is refused
                    self._note(f"driver run {run}: batch {b}, the second S2Writer call ({self.sc.second})")
                self._write_batch(w, facts, run, b, calm)
            if writer.spec.exactly_once:
                self._committed(b)
            self._reset_point(run, b, spark_committed=False)
            self._spark_commit(b)
            self._spark_committed(b, writer.spec.exactly_once)
            self._reset_point(run, b, spark_committed=True)

    def _write_batch(
        self, writer: S2Writer, facts: SessionFacts | None, run: int, b: int, calm: bool
    ) -> None:
        """What ``S2Writer.__call__`` does around the Spark job: ``mode.prepare`` with the session's facts,
        stream creation, the recovery layout a replay asks for, ``mode.commit`` with the aggregated result
        rows (the job itself modelled)."""
        job = writer.mode.prepare(b, facts)
        if job is None:
            self._note(f"driver run {run}: batch {b} is in the ledger, nothing to write")
            return
        if writer is self.writer:
            self._wrote(b, writer.spec.exactly_once)
        writer._create_known_streams()
        job = writer._with_streams_found(job)
        parts = split(self.sc, b, run)
        routed = writer.routing.routed
        recovery = job.recovery_layout
        if recovery:
            layout = RecoveryLayout(self.sc.shuffle_partitions, routed=routed)
            rng = random.Random(f"layout-{self.sc.seed}-{run}-{b}")
            parts = [spark_sorted(self.sc, p, rng) for p in by_content(self.sc, b, layout)]
            job = job.laid_out(layout)
        if writer.spec.exactly_once:
            token = job.plan.fencing_token
            self._note(f"driver run {run}: batch {b} epoch {token} recovery={recovery}")
        plan = job.plan
        if routed and not recovery and by_stream_order(parts):
            plan = dataclasses.replace(plan, rows_by_stream=True)  # as `StreamSplit.tasks_plan`
            self._note(f"driver run {run}: batch {b} rows ordered by stream")
        task = _writer_task(
            plan,
            routed=routed,
            dlq=self.sc.dlq,
            payload=writer.on_error == "dlq",
            order_by=self.sc.order_by,
            compact=self.sc.compact,
        )
        results = self._stage(run, b, parts, task, calm)
        if writer is self.writer and writer.spec.exactly_once:
            self._committing(b)
        rows: list[dict[str, Any]] = [r for res in results for r in res.to_pylist()]
        writer._found_streams(rows)
        writer.mode.commit(job, aggregate(b, rows, 0.0, delivery=writer.mode.name))


def _writer_task(
    plan: WritePlan, *, routed: bool, dlq: bool, payload: bool, order_by: bool, compact: bool
) -> Callable[[list[Row], PartitionContext], pa.RecordBatch]:
    """A write task: its rows' frame written, with ``order_by`` the task's own tie order and ``compact``
    compaction first (the tail of `s2_sink._write.driver.batch_layout.Layout`)."""

    def body(rows: list[Row], ctx: PartitionContext) -> pa.RecordBatch:
        frames = [frame_of(rows, routed=routed, dlq=dlq, payload=payload)] if rows else []
        if order_by and frames:
            frames = _in_order(frames[0], rows, routed=routed, compact=compact)
        return write_partition(plan, frames, ctx)

    return body


def _in_order(frame: pa.RecordBatch, rows: list[Row], *, routed: bool, compact: bool) -> list[pa.RecordBatch]:
    """The task's tie order (`in_change_order`) and compaction (`last_changes`) over `frame` cut in three
    Arrow batches (a key's changes, and a run of tied ones, may straddle them), with the flat changelog's
    key, error and ``order_by`` columns they read (the sim's frame carries ``@key`` in its header list)
    added for them and dropped after."""
    names = frame.schema.names
    extra = {
        KEY: pa.array([key_of(r) for r in rows], pa.binary()),
        _ORDER: pa.array([r.order for r in rows], pa.int64()),
    }
    if ERROR not in names:
        extra[ERROR] = pa.array([r.error for r in rows], pa.string())
    for name, values in extra.items():
        frame = frame.append_column(name, values)
    cuts = [0, len(rows) // 3, 2 * len(rows) // 3, len(rows)]
    kept = in_change_order(
        [frame.slice(a, b - a) for a, b in itertools.pairwise(cuts)], [_ORDER], routed=routed
    )
    if compact:
        kept = last_changes(kept, routed=routed)
    return [f.select(names) for f in kept]


_ORDER = "ts"
"""The ``order_by`` column of the sim's frames."""
