"""A model of what Spark does around the writer: driver runs, stages, task attempts, retries, restarts.

It replaces Spark's scheduling and shuffles (the environment), never the writer: each driver run drives
the front door's own driver side — the delivery mode a real `S2Writer` holds (``writer.mode.prepare`` with
the facts `session_facts` reads off a modelled session, then ``writer.mode.commit``: identity, claims,
take-overs, one coordinator per query and the ledger commit all run for real; the sim applies the Python
twin of the recovery layout the job asks for), or for ``format("s2")`` the real streaming writer — and
each task attempt runs the real `write_partition` with the plan's tagger, token keeper and dedupe hook.

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
  task its rows in fetch order, modelled as a seeded shuffle) and sorts each partition by (stream, key,
  ``order_by``) (`sort_changes`), the rows tied on all of it left in fetch order for the write tasks to
  put in order by the real `in_change_order`; a recovery's layout sorts the same way.
"""

from __future__ import annotations

import functools
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal

from s2_sink._exactly_once import ends_cache as _ends_cache
from s2_sink._exactly_once import ledger as _ledger
from s2_sink._exactly_once import sink_run as _sink_run
from s2_sink._exactly_once.ledger import LEDGER_PREFIX, ledger_stream_name
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import SessionPool, install_pool
from s2_sink._write.driver import delivery as _delivery_modes
from s2_sink._write.spec import Delivery
from s2_sink._write.write_plan import PartitionContext
from s2_sink.config import S2Config
from s2_sink.errors import ReplayMismatchError, StreamResetError
from s2_sink.writer import S2Writer
from tests.sim._changes import ChangeFront
from tests.sim._foreign import spawn_foreign_fencer
from tests.sim._invariants import Violation, check_batches, check_ledger, check_upsert_order
from tests.sim._memory_s2 import MemoryService
from tests.sim._operator import spawn_fence_clearer, spawn_stream_recreator
from tests.sim._partitioning import split
from tests.sim._refusals import QueryFailed, accepted_refusal, asks_for_a_new_process
from tests.sim._scenario import (
    MIRROR_WRITER,
    OTHER_QUERY_ID,
    SINGLE_STREAM,
    Row,
    Scenario,
)
from tests.sim._scheduler import Actor, Op, Scheduler, SimCrash, Verdict
from tests.sim._sink_front import SinkFront
from tests.sim._wirings import WiringFront
from tests.sim._writer_front import WriterFront

__all__ = ["BASIN", "Query"]

BASIN = "simulated-basin"
QUERY_ID = "query-1"
_MAX_TASK_ATTEMPTS = 4  # spark.task.maxFailures
_MAX_STAGE_ATTEMPTS = 4  # spark.stage.maxConsecutiveAttempts

ZOMBIE_PROFILES = ("task-zombies", "stage-zombies", "cleared-fence", "zombie-takeover", "retry-readback")
Shape = Literal["new process", "same process, same writer", "same process, new writer"]


class Query(ChangeFront, WiringFront, WriterFront):
    """One streaming query over the scenario's micro-batches, started again after every failure."""

    def __init__(
        self,
        scenario: Scenario,
        sched: Scheduler,
        service: MemoryService,
        delivery: Delivery = "exactly-once",
        *,
        other: Query | None = None,
    ) -> None:
        self.sc = scenario
        """What this query writes (``shared-writer``'s second query: the scenario's `Scenario.shared`)."""
        self.check = scenario
        """What the invariants check: every query's rows."""
        self.query_id = QUERY_ID
        self.other = other
        """``shared-writer``: the other query, which shares this one's `S2Writer` object."""
        self.prefix = ""
        """Before this query's actor names (the second query's: ``q2.``)."""
        if other is not None:
            self.sc = replace(scenario, seed=scenario.seed + 1_000_000, batches=scenario.shared, shared=())
            self.query_id, self.prefix = OTHER_QUERY_ID, "q2."
            other.other = self
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
            max_retries=1,
            # Timeouts are watchdogs the scheduler never waits for (it steps only a quiet process): far
            # enough that a slow machine does not make one fire and change the schedule.
            request_timeout_ms=600_000,
        )
        if scenario.configs:  # changed: the stream column or shards override the one stream
            self.cfg = self.cfg.replace(stream=SINGLE_STREAM)
        self.sink = SinkFront(self.cfg, scenario, self.query_id) if scenario.front == "sink" else None
        self.pools: list[SessionPool] = []
        self.spark_committed = -1
        """The last batch in Spark's checkpoint (``commits/N``): a restart replays from the next."""
        self.ledger_committed = -1
        self.finished = False
        self.refused: str | None = None
        """A documented refusal that stopped the query for good (`accepted_refusal`)."""
        self.reset: StreamResetError | None = None
        """The `StreamResetError` the last failed run stopped with, if that was its cause."""
        self.last_failure = ""
        self.faults = self.zombie_steps = self.runs = self.task_ids = self.stage_ids = 0
        self.writer: S2Writer | None = None
        """The ``foreachBatch`` function's `S2Writer` (kept by a restart in the same process, same writer)."""
        self.second: S2Writer | None = None
        """``several-writers``: the writer the function calls second (`_second_writer`)."""
        mirrored = scenario.second in ("mirror", "unnamed mirror")
        self.mirror_ledger = ledger_stream_name(MIRROR_WRITER) if mirrored else None
        """The ledger of the second writer's identity, when it writes to another stream."""
        self.writer_name: str | None = None
        """``renamed``: the explicit writer_id of the current start (None: the default identity)."""
        self.reset_pending = False
        """``ledger-reset``: the ledger stream is deleted before the next start."""
        self.new_process_fixes = 0
        """Restarts in a new process that a refusal without a run id asked for (`asks_for_a_new_process`)."""
        self.session_ops: Counter[int] = Counter()
        """``task-zombies``/``stage-zombies``: data appends per task actor so far."""
        self._setup_changes(scenario, service.store, service.basin)
        self._setup_wirings(scenario)
        if scenario.shared:  # one object for both queries, created in their one process
            self.writer = other.writer if other is not None else self._new_writer()

    def _note(self, text: str) -> None:
        self.sched.note(f"{self.prefix}{text}")

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
        first = self._first_run_fault(actor, op)
        if first is not None:
            return first  # type: ignore[return-value]
        if actor.calm or self.faults >= self.sc.max_faults or rng.random() >= self.sc.fault_rate:
            return "ok"
        choices: list[Verdict]
        if op.kind == "session":
            # "reconnect": S2's advice on an ack: finish this session, open another
            choices = ["refuse", "ambiguous", "crash_before", "crash_after", "lost", "reconnect"]
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
        if self.other is None or self.prefix == "":
            self._new_process()
        self._spawn_run("new process")
        if self.sc.profile in ("cleared-fence", "zombie-takeover"):
            stall = self.sc.profile == "zombie-takeover"
            spawn_fence_clearer(self.sched, self.service, self.cfg, stall_zombies=stall)
        if self.sc.profile == "foreign-writer":
            after = self.sc.foreign_after_commit
            spawn_foreign_fencer(self.sched, self.service, self.cfg, lambda: self.ledger_committed, after)
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
        _ledger.forget_created()  # the ledgers and registers this process created or found
        _sink_run._planned.clear()  # ... and the format("s2") executions it planned
        _delivery_modes._claims.clear()  # ... and which writer objects began which identities' batches
        _ends_cache._folds.clear()  # ... and the ledger folds of over 32 stream ends its tasks looked up
        if not self.sc.shared:
            self.writer = None
        self.task_ids = 0

    def _spawn_run(self, shape: Shape, *, fresh: bool = False) -> None:
        if self.sched.over:  # a driver of a schedule that ended: its process is gone
            return
        if fresh:
            self._new_process()
        run = self.runs
        self.runs += 1
        calm = run >= self.sc.max_restarts
        self._configure(run, calm)
        self._note(f"driver run {run} starts ({shape}{', no faults' if calm else ''})")
        self.sched.spawn(f"{self.prefix}driver{run}", "driver", lambda: self._driver(run, calm), calm=calm)

    def _driver(self, run: int, calm: bool) -> None:
        try:
            if self.sc.front == "writer":
                self._writer_run(run, calm)
            else:
                self._sink_run(run, calm)
            self.finished = True
        except BaseException as exc:
            if accepted_refusal(self.sc, exc):
                self.refused = f"{type(exc).__name__}: {exc}"
                self._note(f"driver run {run}: refused ({self.refused[:200]})")
                return
            ledger = ledger_stream_name(self.writer_name or self.query_id)
            if self._fix_refused_change(exc, self.service.store, BASIN, ledger):
                self._note(f"driver run {run} refused: {str(exc)[:160]}; restarted with the old setting")
                self._spawn_run("new process", fresh=True)
                return
            if self._follow_wiring_fix(exc):
                self._spawn_run("new process", fresh=True)
                return
            if asks_for_a_new_process(exc) and self.new_process_fixes < 4:
                # Without a run id, a restart in the same process with the same writer cannot be told from
                # a second call: refused before writing, naming the fix, which the user follows.
                self.new_process_fixes += 1
                self._note(f"driver run {run} refused: {str(exc)[:120]}; restarted in a new process")
                self._spawn_run("new process", fresh=True)
                return
            self.last_failure = f"{type(exc).__name__}: {exc}"
            cause = exc if isinstance(exc, StreamResetError) else exc.__cause__
            self.reset = cause if isinstance(cause, StreamResetError) else None
            self._note(f"driver run {run} fails: {self.last_failure[:200]}")
            if not calm and not isinstance(exc, Violation):
                self._restart()
            raise

    def _restart(self) -> None:
        if self.sched.over or self._race():
            return
        shapes: list[Shape] = ["new process", "same process, same writer", "same process, new writer"]
        if self.sc.front == "sink":
            shapes = ["new process", "same process, new writer"]
        if self.other is not None:  # the other query runs on in the process, with the shared object
            shapes = ["same process, same writer"]
        shape = shapes[self.sched.rng.randrange(len(shapes))]
        if self.reset_pending:
            self._delete_ledgers()
            shape = "new process"
        if self.sc.profile == "renamed" and shape != "same process, same writer":
            # A notebook restarts the query from its checkpoint with a writer_id spelled anew: the new
            # identity must take over what the old one left (issue 25 item 3).
            self.writer_name = f"renamed-{self.runs}"
            self._note(f"the restarted query's writer is S2Writer(writer_id={self.writer_name!r})")
        if shape == "new process":
            self._new_process()
        elif shape == "same process, new writer":
            self.writer = None
        self._spawn_run(shape)

    def _reset_point(self, run: int, batch: int, *, spark_committed: bool) -> None:
        """``ledger-reset``: the first run's process dies here (after batch 0's ledger commit, before or after
        Spark's); the restart finds the ledger stream deleted."""
        if (self.sc.profile, run, batch, spark_committed) == (
            "ledger-reset",
            0,
            0,
            self.sc.reset_after_spark,
        ):
            self._note("driver run 0 stops; the ledger stream is deleted before the next start")
            self.reset_pending = True
            raise SimCrash()

    def _delete_ledgers(self) -> None:
        """The ledger streams are deleted (and the deletion completes) while the query is stopped."""
        self.reset_pending = False
        basin = self.service.store.basins[self.service.basin]
        for name in [n for n in basin.streams if n.startswith(LEDGER_PREFIX)]:
            self.service.store.delete_stream(self.service.basin, name)
            basin.streams.pop(name, None)

    def _spark_commit(self, batch: int) -> None:
        self.sched.wait(Op("spark-commit", detail=f"batch {batch}"), lambda: True)
        self.spark_committed = batch

    def _committed(self, batch: int) -> None:
        self.ledger_committed = max(self.ledger_committed, batch)
        upto = self.checked_upto()
        check_batches(self.service.store, BASIN, self.check, upto)
        check_upsert_order(self.service.store, BASIN, self.check, upto)
        check_ledger(self.service.store, BASIN)

    def checked_upto(self) -> int:
        """The last batch whose rows are all written: committed by every query that has such a batch."""
        if self.other is None:
            return self.ledger_committed
        queries = (self, self.other)
        last = max(len(q.sc.batches) for q in queries) - 1
        b = -1
        while b < last and all(q.ledger_committed > b or b + 1 >= len(q.sc.batches) for q in queries):
            b += 1
        return b

    # -- format("s2") --------------------------------------------------------------------------------------

    def _sink_run(self, run: int, calm: bool) -> None:
        """A start of ``df.writeStream.format("s2")``: per micro-batch execution, the real streaming writer
        pickled for the tasks (which plans the execution), its ``write`` in every task attempt, and
        ``commit`` (``abort`` when the job fails) on a writer created again (`SinkFront`)."""
        sink = self.sink
        assert sink is not None
        for b in range(self.spark_committed + 1, len(self.sc.batches)):
            shipped, planned = sink.ship()
            assert planned._run is not None
            self._note(f"driver run {run}: batch {b} execution epoch {planned._run.epoch}")
            split_run = 0 if self.sc.same_split_on_replay else run
            parts = split(self.sc, b, split_run)
            task = functools.partial(sink.write, shipped)
            try:
                messages = self._stage(run, b, parts, task, calm)
            except (QueryFailed, ReplayMismatchError):
                sink.abort(b, [])  # Spark aborts a failed write job (its finished tasks' messages)
                raise
            sink.commit(b, messages)
            self._committed(b)
            self._reset_point(run, b, spark_committed=False)
            self._spark_commit(b)
            self._reset_point(run, b, spark_committed=True)

    # -- one stage: task attempts, task retries, stage retries ----------------------------------------------

    def _stage(
        self,
        run: int,
        batch: int,
        parts: list[list[Row]],
        body: Callable[[list[Row], PartitionContext], Any],
        calm: bool,
    ) -> list[Any]:
        stage = self.stage_ids
        self.stage_ids += 1
        stage_attempt = 0
        done: dict[int, Any] = {}
        failures: Counter[int] = Counter()
        running: dict[int, tuple[Actor, int, int]] = {}

        def launch(p: int, attempt: int) -> None:
            tid = self.task_ids
            self.task_ids += 1
            ctx = PartitionContext(batch, p, attempt, tid, stage)
            name = f"{self.prefix}r{run}.b{batch}.p{p}.a{attempt}.t{tid}" + (
                f".s{stage_attempt}" if stage_attempt else ""
            )
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
                    self._note(f"{actor.name} is lost to Spark and retried; it goes on as a zombie")
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
                    self._note(f"stage retry {stage_attempt} of batch {batch}; zombies: {zombies}")
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
