"""A model of what Spark does around the writer: driver runs, stages, task attempts, retries, restarts.

It replaces Spark's scheduling and shuffles (the environment), never the writer: each driver run calls
the real driver side (`Coordinator.begin_batch`/`commit_batch` as `S2Writer`'s exactly-once mode does,
or `open_sink_run`/`SinkRun.plan_batch`/`commit_sink_run` for ``format("s2")``), and each task attempt
runs the real `write_partition` with the plan's tagger, token keeper and dedupe hook.

Spark's behaviour modelled (each a source of faults the scheduler may pick):

- a failed task attempt is retried with attempt number + 1 and a higher task id, at most 4 attempts;
- a shuffle fetch failure retries the stage: attempt numbers restart at 0, task ids keep rising
  (SPARK-24552), partitions already written are not run again, and the old stage attempt's running tasks
  go on as zombies;
- a driver that dies (before or after its ledger commit, or before Spark's own commit) leaves its tasks
  running as zombies; the query is started again, in one of three shapes: a new process (fresh module
  state, new task ids, a fresh session pool), the same process with the same writer object, or the same
  process with a new writer object;
- a replay after a restart is split into partitions differently (SPARK-28650); ``foreachBatch`` writers
  lay a recovery batch out by record content (`RecoveryLayout`, the Python twin of the Spark shuffle the
  writer asks for, checked against Spark in tests/integration/test_recovery_layout_spark.py);
- with ``UpsertEncoder(order_by=...)`` the writer repartitions by (stream, key) (an arbitrary hash over a
  partition count that may change between runs, as adaptive execution may coalesce; the shuffle hands each
  task its rows in fetch order, modelled as a seeded shuffle) and sorts each partition into change order
  (`sort_changes`, modelled by its Python twin `sorted_indices`, which
  tests/integration/test_upsert_order_spark.py proves equal); a recovery's layout sorts the same way.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from collections.abc import Callable
from typing import Any, Literal

import pyarrow as pa

from s2_sink._exactly_once import bookkeeping_streams as _bookkeeping_streams
from s2_sink._exactly_once import sink_run as _sink_run
from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.identity import check_no_speculation, query_run_id, writer_identity
from s2_sink._exactly_once.ledger import LEDGER_PREFIX
from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._exactly_once.sink_run import SinkRun, commit_sink_run, open_sink_run
from s2_sink._exactly_once.task import plan_with_layout
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.session_pool import SessionPool, install_pool
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import Routing
from s2_sink._write.plan import PartitionContext, WritePlan
from s2_sink._write.spec import Delivery, WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink.config import S2Config
from s2_sink.encoders._change_order import sorted_indices
from s2_sink.encoders._frame import BODY, HEADERS
from s2_sink.errors import ReplayMismatchError, StreamResetError
from s2_sink.writer import _ensure_streams
from tests.sim._invariants import Violation, check_batches, check_ledger, check_upsert_order
from tests.sim._memory_s2 import MemoryService
from tests.sim._operator import spawn_fence_clearer, spawn_stream_recreator
from tests.sim._scenario import DLQ_STREAM, SINGLE_STREAM, Row, Scenario, frame_of
from tests.sim._scheduler import Actor, Op, Scheduler, Verdict
from tests.sim._session import Session

__all__ = ["BASIN", "Query"]

BASIN = "simulated-basin"
QUERY_ID = "query-1"
WRITER_ID = QUERY_ID  # the default identity: the streaming query id
_MAX_TASK_ATTEMPTS = 4  # spark.task.maxFailures
_MAX_STAGE_ATTEMPTS = 4  # spark.stage.maxConsecutiveAttempts

ZOMBIE_PROFILES = ("task-zombies", "stage-zombies", "cleared-fence", "zombie-takeover", "retry-readback")
Shape = Literal["new process", "same process, same writer", "same process, new writer"]


class QueryFailed(Exception):
    """Spark gave up on the micro-batch (a task failed too often): the query stops with an error."""


class Query:
    """One streaming query over the scenario's micro-batches, started again after every failure."""

    def __init__(
        self,
        scenario: Scenario,
        sched: Scheduler,
        service: MemoryService,
        delivery: Delivery = "exactly-once",
    ) -> None:
        self.sc = scenario
        self.delivery = delivery
        self.sched = sched
        self.service = service
        self.cfg = S2Config(
            basin=BASIN,
            stream=None if scenario.routed and not scenario.shards else SINGLE_STREAM,
            access_token="sim",
            account_endpoint="http://127.0.0.1:1",
            basin_endpoint="http://127.0.0.1:1",
            create_streams=True,
            batch_max_records=scenario.batch_max_records,
            max_inflight_requests=2,
            retry_delay_ms=1,
            session_retries=1,
            max_retries=1,
            bulk_append=scenario.bulk,
            # Timeouts are watchdogs the scheduler never waits for (it steps only a quiet process): far
            # enough that a slow machine does not make one fire and change the schedule.
            request_timeout_ms=600_000,
            session_idle_timeout_ms=3_600_000,
        )
        routing = Routing.build(
            stream=self.cfg.stream,
            stream_column="target" if scenario.routed and not scenario.shards else None,
            shards=scenario.shards,
        )
        self.spec = WriteSpec.build(
            self.cfg,
            routing,
            on_error="dlq" if scenario.dlq else "fail",
            dlq_stream=DLQ_STREAM if scenario.dlq else None,
            delivery=delivery,
        )
        self.pools: list[SessionPool] = []
        self.spark_committed = -1
        """The last batch in Spark's checkpoint (``commits/N``): a restart replays from the next."""
        self.ledger_committed = -1
        self.finished = False
        self.refused: str | None = None
        """A documented refusal that stops the query for good (``format("s2")``'s ReplayMismatchError)."""
        self.reset: StreamResetError | None = None
        """The `StreamResetError` the last failed run stopped with, if that was its cause."""
        self.last_failure = ""
        self.faults = 0
        self.zombie_steps = 0
        self.runs = 0
        self.task_ids = 0
        self.stage_ids = 0
        self.coordinator: Coordinator | None = None
        self.writer_name: str | None = None
        """``renamed``: the explicit writer_id of the current start (None: the default identity)."""
        self.session_ops: Counter[int] = Counter()
        """``task-zombies``/``stage-zombies``: data appends per task actor so far."""

    # -- faults ------------------------------------------------------------------------------------------

    def policy(self, actor: Actor, op: Op, rng: random.Random) -> Verdict:
        """The fault at `op`, drawn with the scheduler's RNG within the scenario's budget; then, at a bulk
        session's step left without one, a connection drop at the scenario's fault rate, drawn with the
        scheduler's RNG of drops (so a schedule without a drop is the one it was before drops were
        simulated)."""
        verdict = self._fault(actor, op, rng)
        if (
            verdict == "ok"
            and op.kind == "session"
            and self.sc.bulk
            and self.sc.profile not in ZOMBIE_PROFILES
            and not actor.calm
            and self.faults < self.sc.max_faults
            and self.sched.drops.random() < self.sc.fault_rate
        ):
            self.faults += 1
            return "drop"
        return verdict

    def _fault(self, actor: Actor, op: Op, rng: random.Random) -> Verdict:
        if actor.role == "task" and not actor.name.startswith(f"r{self.runs - 1}."):
            self.zombie_steps += 1  # a task of an earlier run goes on after the restart
        if self.sc.profile in ZOMBIE_PROFILES:
            return self._zombie_fault(actor, op, rng)
        if actor.calm or self.faults >= self.sc.max_faults or rng.random() >= self.sc.fault_rate:
            return "ok"
        choices: list[Verdict]
        if op.kind == "session":
            choices = ["refuse", "ambiguous", "crash_before", "crash_after", "lost"]
            if self.sc.bulk:
                choices.append("reconnect")  # S2's advice on an ack: finish this session, open another
            if self.sc.profile in ("stage-retries", "upsert-order"):
                choices += ["fetch_failed", "fetch_failed"]
        elif op.kind == "append" and op.detail.startswith("fence"):
            # A lost fence reply costs the writer a real 0.1 s back-off: rarer than crashes.
            crashes: list[Verdict] = ["crash_before", "crash_after"]
            choices = [*crashes, *crashes, *crashes, *crashes, "ambiguous"]
        elif op.kind == "append" and op.target.startswith(LEDGER_PREFIX):
            # A refused ledger append (503) costs the writer a real 0.1 s back-off: rarer than the rest.
            choices = ["ambiguous", "crash_before", "crash_after"] * 3
            choices.append("refuse")
        elif op.kind == "append":
            choices = ["ambiguous", "crash_before", "crash_after"]
            if actor.role == "task":
                choices.append("lost")
        else:  # reads, tails, stream creation, a driver waiting for its tasks or about to commit in Spark
            choices = ["crash_before"]
        self.faults += 1
        return choices[rng.randrange(len(choices))]

    def _zombie_fault(self, actor: Actor, op: Op, rng: random.Random) -> Verdict:
        """``task-zombies``: an attempt lost to Spark at its first data append (so it has the most left to
        append after its retry's barrier); ``stage-zombies``: at most two fetch failures, each at a later
        one (so the failing attempt and its running siblings have written some records before the stage is
        retried), and no fault that would retry a partition by number and mask the stage retry."""
        if actor.role != "task" or op.kind != "session" or self.faults >= self.sc.max_faults:
            return "ok"
        self.session_ops[actor.id] += 1
        first = self.session_ops[actor.id] == 1
        if self.sc.profile in ("task-zombies", "cleared-fence", "zombie-takeover", "retry-readback"):
            if not first or rng.random() >= self.sc.fault_rate:
                return "ok"
            self.faults += 1
            return "lost"
        if first or self.faults >= 2 or rng.random() >= self.sc.fault_rate / 3:
            return "ok"
        self.faults += 1
        return "fetch_failed"

    # -- runs --------------------------------------------------------------------------------------------

    def start(self) -> None:
        self._new_process()
        self._spawn_run("new process")
        if self.sc.profile in ("cleared-fence", "zombie-takeover"):
            stall = self.sc.profile == "zombie-takeover"
            spawn_fence_clearer(self.sched, self.service, self.cfg, stall_zombies=stall)
        if self.sc.profile == "recreated":
            later = [r.stream or SINGLE_STREAM for b in self.sc.batches[1:] for r in b]
            first = {r.stream or SINGLE_STREAM for r in self.sc.batches[0]}
            targets = [s for s in later if s in first]
            spawn_stream_recreator(self.sched, self.service, lambda: self.ledger_committed, targets)

    def _new_process(self) -> None:
        """Module state of a fresh Python process: no pooled clients or sessions, no known ledgers."""
        pool = SessionPool(self.service.client_factory)
        self.pools.append(pool)
        install_pool(pool)
        _bookkeeping_streams.forget_all()  # the ledgers and registers this process created or found
        _sink_run._planned.clear()  # ... and the format("s2") executions it planned
        self.coordinator = None
        self.task_ids = 0

    def _spawn_run(self, shape: Shape) -> None:
        run = self.runs
        self.runs += 1
        calm = run >= self.sc.max_restarts
        self.sched.note(f"driver run {run} starts ({shape}{', no faults' if calm else ''})")
        self.sched.spawn(f"driver{run}", "driver", lambda: self._driver(run, calm), calm=calm)

    def _driver(self, run: int, calm: bool) -> None:
        try:
            if self.sc.front == "writer":
                self._writer_run(run, calm)
            else:
                self._sink_run(run, calm)
            self.finished = True
        except ReplayMismatchError as exc:
            self.refused = str(exc)
            self.sched.note(f"driver run {run}: the replay is refused (ReplayMismatchError)")
        except BaseException as exc:
            self.last_failure = f"{type(exc).__name__}: {exc}"
            cause = exc if isinstance(exc, StreamResetError) else exc.__cause__
            self.reset = cause if isinstance(cause, StreamResetError) else None
            self.sched.note(f"driver run {run} fails: {self.last_failure[:200]}")
            if not calm and not isinstance(exc, Violation):
                self._restart()
            raise

    def _restart(self) -> None:
        shapes: list[Shape] = ["new process", "same process, same writer", "same process, new writer"]
        if self.sc.front == "sink":
            shapes = ["new process", "same process, new writer"]
        shape = shapes[self.sched.rng.randrange(len(shapes))]
        if self.sc.profile == "renamed" and shape != "same process, same writer":
            # A notebook restarts the query from its checkpoint with a writer_id spelled anew: the new
            # identity must take over what the old one left (issue 25 item 3).
            self.writer_name = f"renamed-{self.runs}"
            self.sched.note(f"the restarted query's writer is S2Writer(writer_id={self.writer_name!r})")
        if shape == "new process":
            self._new_process()
        elif shape == "same process, new writer":
            self.coordinator = None
        self._spawn_run(shape)

    def _spark_commit(self, batch: int) -> None:
        self.sched.wait(Op("spark-commit", detail=f"batch {batch}"), lambda: True)
        self.spark_committed = batch

    def _committed(self, batch: int) -> None:
        self.ledger_committed = max(self.ledger_committed, batch)
        check_batches(self.service.store, BASIN, self.sc, self.ledger_committed)
        check_upsert_order(self.service.store, BASIN, self.sc, self.ledger_committed)
        check_ledger(self.service.store, BASIN)

    # -- foreachBatch(S2Writer) ----------------------------------------------------------------------------

    def _at_least_once_run(self, run: int, calm: bool) -> None:
        """The control: ``S2Writer(delivery="at-least-once")`` under the same faults (no ledger, no tags)."""
        for b in range(self.spark_committed + 1, len(self.sc.batches)):
            _runtime.run(_ensure_streams(self.cfg, self.spec.streams_to_create()))
            self._stage(run, b, self._split(b, run), _writer_task(self.spec.plan(b), self.sc), calm)
            self._spark_commit(b)

    def _writer_run(self, run: int, calm: bool) -> None:
        if self.delivery == "at-least-once":
            self._at_least_once_run(run, calm)
            return
        # The identity and the run id as `ExactlyOnce.prepare` resolves them (its recovery repartition needs
        # a JVM, so the coordinator is driven here with what prepare would give it).
        spark = Session(QUERY_ID, f"run-{run}", self.sc.run_id_known)
        check_no_speculation(spark)
        ident = writer_identity(self.writer_name, spark, self.spec.destination())
        spark_run = query_run_id(spark, ident.query_id)
        if self.coordinator is None:
            self.coordinator = Coordinator(
                self.cfg,
                ident.writer_id,
                query_id=ident.query_id,
                static_streams=self.spec.static_streams(),
                destination=self.spec.destination(),
                predecessor=ident.predecessor,
            )
        coord = self.coordinator
        for b in range(self.spark_committed + 1, len(self.sc.batches)):
            _runtime.run(_ensure_streams(self.cfg, self.spec.streams_to_create()))  # as S2Writer does
            epoch = coord.begin_batch(b, spark_run)
            if epoch is None:
                self.sched.note(f"driver run {run}: batch {b} is in the ledger, nothing to write")
            else:
                plan = self.spec.plan(b, epoch)
                parts = self._split(b, run)
                if epoch.recovery:
                    layout = RecoveryLayout(self.sc.shuffle_partitions, routed=self.sc.routed)
                    parts = [self._in_change_order(p) for p in self._by_content(b, layout)]
                    plan = plan_with_layout(plan, layout)
                self.sched.note(f"driver run {run}: batch {b} epoch {epoch.token} recovery={epoch.recovery}")
                results = self._stage(run, b, parts, _writer_task(plan, self.sc), calm)
                coord.commit_batch(b, _ends(b, results))
            self._committed(b)
            self._spark_commit(b)

    # -- format("s2") --------------------------------------------------------------------------------------

    def _sink_run(self, run: int, calm: bool) -> None:
        for b in range(self.spark_committed + 1, len(self.sc.batches)):
            opened = open_sink_run(self.cfg, WRITER_ID, QUERY_ID, self.spec.static_streams())
            self.sched.note(f"driver run {run}: batch {b} execution epoch {opened.epoch}")
            split_run = 0 if self.sc.same_split_on_replay else run
            parts = self._split(b, split_run)
            results = self._stage(run, b, parts, _sink_task(opened, self.spec, self.sc), calm)
            commit_sink_run(self.cfg, WRITER_ID, opened, b, _ends(b, results), query_id=QUERY_ID)
            self._committed(b)
            self._spark_commit(b)

    # -- partitioning ---------------------------------------------------------------------------------------

    def _split(self, batch: int, run: int) -> list[list[Row]]:
        """How Spark splits the batch's rows in `run` (a replay may split them otherwise, SPARK-28650)."""
        rng = random.Random(f"split-{self.sc.seed}-{run}-{batch}")
        parts: list[list[Row]] = [[] for _ in range(rng.randint(1, 3))]
        for row in self.sc.batches[batch]:
            parts[rng.randrange(len(parts))].append(row)
        if self.sc.order_by:
            return self._by_key(parts, rng)
        return parts

    def _by_key(self, split: list[list[Row]], rng: random.Random) -> list[list[Row]]:
        """What the writer asks of Spark with ``order_by``: ``repartition(_s2_stream?, _s2_key)`` (a hash of
        the target stream and key over some partition count), then ``sort_changes`` in each partition."""
        parts: list[list[Row]] = [[] for _ in range(rng.randint(1, 3))]
        for row in (r for p in split for r in p):
            stream = (row.stream or SINGLE_STREAM).encode() if self.sc.routed else b""
            h = hashlib.blake2b(stream + b"\0" + row.headers[0][1], digest_size=8).digest()
            parts[int.from_bytes(h, "big") % len(parts)].append(row)
        for p in parts:
            rng.shuffle(p)  # the order a task fetches its shuffle blocks in is not the input order
        return [self._in_change_order(p) for p in parts]

    def _in_change_order(self, rows: list[Row]) -> list[Row]:
        """``sortWithinPartitions(_s2_order, _s2_body, _s2_headers)`` of one partition (`sort_changes`), by
        its Python twin; the rows as they are without ``order_by``."""
        if not self.sc.order_by or len(rows) < 2:
            return rows
        frame = frame_of(rows, routed=self.sc.routed, dlq=self.sc.dlq)
        order = [pa.array([r.order for r in rows], pa.int64())]
        indices = sorted_indices(order, frame.column(BODY), frame.column(HEADERS))
        return [rows[i] for i in indices.to_pylist()]

    def _by_content(self, batch: int, layout: RecoveryLayout) -> list[list[Row]]:
        """The recovery shuffle ``repartition(n, xxhash64(stream?, body, headers))``."""
        parts: list[list[Row]] = [[] for _ in range(layout.partitions)]
        for row in self.sc.batches[batch]:
            stream = row.stream if row.stream is not None else SINGLE_STREAM
            parts[layout.partition_of(stream, list(row.headers), row.body)].append(row)
        return parts

    # -- one stage: task attempts, task retries, stage retries ----------------------------------------------

    def _stage(
        self,
        run: int,
        batch: int,
        parts: list[list[Row]],
        body: Callable[[list[Row], PartitionContext], pa.RecordBatch | None],
        calm: bool,
    ) -> list[pa.RecordBatch]:
        stage = self.stage_ids
        self.stage_ids += 1
        stage_attempt = 0
        done: dict[int, pa.RecordBatch | None] = {}
        failures: Counter[int] = Counter()
        running: dict[int, tuple[Actor, int, int]] = {}

        def launch(p: int, attempt: int) -> None:
            tid = self.task_ids
            self.task_ids += 1
            ctx = PartitionContext(batch, p, attempt, tid, stage)
            name = f"r{run}.b{batch}.p{p}.a{attempt}.t{tid}" + (f".s{stage_attempt}" if stage_attempt else "")
            actor = self.sched.spawn(name, "task", lambda: body(parts[p], ctx), calm=calm)
            running[actor.id] = (actor, p, attempt)

        for p in range(len(parts)):
            launch(p, 0)
        while len(done) < len(parts):
            self.sched.wait(
                Op("wait", detail=f"batch {batch} tasks"),
                lambda: any(a.state == "done" or a.lost for a, _, _ in running.values()),
            )
            finished = [
                running.pop(i) for i in sorted(running) if running[i][0].state == "done" or running[i][0].lost
            ]
            for actor, p, attempt in finished:
                if actor.lost:
                    self.sched.note(f"{actor.name} is lost to Spark and retried; it goes on as a zombie")
                    failures[p] += 1
                    if failures[p] >= _MAX_TASK_ATTEMPTS:
                        raise QueryFailed(f"partition {p} of batch {batch} failed: attempt lost")
                    launch(p, attempt + 1)
                elif actor.outcome == "ok":
                    done[p] = actor.result
                elif actor.outcome == "fetch-failed":
                    stage_attempt += 1
                    if stage_attempt >= _MAX_STAGE_ATTEMPTS:
                        raise QueryFailed(f"stage of batch {batch} failed {stage_attempt} times")
                    zombies = [a.name for a, _, _ in running.values()]
                    self.sched.note(f"stage retry {stage_attempt} of batch {batch}; zombies: {zombies}")
                    running.clear()
                    for q in range(len(parts)):
                        if q not in done:
                            launch(q, 0)
                    break
                else:
                    if isinstance(actor.error, ReplayMismatchError):
                        raise actor.error
                    failures[p] += 1
                    if failures[p] >= _MAX_TASK_ATTEMPTS:
                        failed = f"partition {p} of batch {batch} failed: {actor.outcome}"
                        raise QueryFailed(failed) from actor.error
                    launch(p, attempt + 1)
        return [r for r in done.values() if r is not None]

    # -- end of schedule -----------------------------------------------------------------------------------

    def close(self) -> None:
        for pool in self.pools:
            _runtime.run(pool.close_all())


def _writer_task(plan: WritePlan, sc: Scenario) -> Callable[[list[Row], PartitionContext], pa.RecordBatch]:
    def body(rows: list[Row], ctx: PartitionContext) -> pa.RecordBatch:
        frames = [frame_of(rows, routed=sc.routed, dlq=sc.dlq)] if rows else []
        return write_partition(plan, frames, ctx)

    return body


def _sink_task(
    opened: SinkRun, spec: WriteSpec, sc: Scenario
) -> Callable[[list[Row], PartitionContext], pa.RecordBatch | None]:
    def body(rows: list[Row], ctx: PartitionContext) -> pa.RecordBatch | None:
        epoch = opened.plan_batch(ctx.batch_id, QUERY_ID)
        if epoch is None:
            return None
        frames = [frame_of(rows, routed=sc.routed, dlq=sc.dlq)] if rows else []
        return write_partition(spec.plan(ctx.batch_id, epoch), frames, ctx)

    return body


def _ends(batch: int, results: list[pa.RecordBatch]) -> dict[str, int]:
    rows: list[dict[str, Any]] = [r for res in results for r in res.to_pylist()]
    return aggregate(batch, rows, 0.0, delivery="exactly-once").end_positions()
