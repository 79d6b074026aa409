"""Exactly-once under real faults: streaming queries in their own driver processes against the lite server,
crashed at named points (executor Python workers killed with ``os._exit``, the driver killed with SIGKILL
and restarted from its checkpoint), with server faults (503s, dropped connections, slow acks). After each
run the target streams are read back and every input id must appear exactly once. The same faults under
``delivery="at-least-once"`` must show duplicates, so the check can tell the two modes apart.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from s2_sink.lite import LiteServer
from tests.faults._harness import run_scenario

pytestmark = [pytest.mark.faults, pytest.mark.spark]

# Every executor-side crash point, each at a different micro-batch/partition/chunk.
EXECUTOR_CRASHES: list[dict[str, Any]] = [
    {"point": "before_append", "batch": 0, "partition": 0, "chunk": 1},
    {"point": "mid_session", "batch": 0, "partition": 2, "chunk": 1},
    {"point": "after_append_before_ack", "batch": 1, "partition": 1, "chunk": 1},
    {"point": "after_ack_before_task_end", "batch": 1, "partition": 3},
]

# The driver SIGKILLed: after every task succeeded but before the ledger commit; after the ledger commit but
# before Spark's commits/N; and mid-batch while executors are appending (they may keep going as zombies).
DRIVER_KILLS: list[dict[str, Any]] = [
    {"point": "after_tasks_before_commit", "batch": 1, "action": "kill_driver"},
    {"point": "after_commit_before_spark_commit", "batch": 2, "action": "kill_driver"},
    {"point": "after_append_before_ack", "batch": 3, "partition": 0, "chunk": 1, "action": "kill_driver"},
]

# Replays after a restart split the input files differently, so a replayed batch is partitioned
# differently from the attempt that died (SPARK-28650): (partition, batch) cannot be a dedupe key.
REPARTITION_ON_RESTART = {"max_partition_bytes": 1500}


@pytest.mark.timeout(600)
def test_executor_crashes_upsert_sharded_exactly_once(tmp: Path, eo_server: LiteServer) -> None:
    """Executor Python workers die before an append, mid-session (appends in flight), after an append
    before its ack is processed, and after all acks before the task ends; Spark retries each task, and the
    retry subtracts what the dead attempt wrote: each upserted row is in the 3 shards exactly once."""
    out = run_scenario(
        tmp,
        eo_server.endpoint,
        encoder="upsert",
        shards=3,
        files=2,
        rows=150,
        rules=EXECUTOR_CRASHES,
        batch_max_records=5,
    )
    print(out.summary())
    assert out.fired == len(EXECUTOR_CRASHES)
    assert out.exits == [0]
    assert out.exactly_once(), out.summary()
    # The crashes really split batch 0 between dead attempts and their retries (in batch 1 the dead attempts
    # may have written everything before dying: then the retries' subtraction leaves nothing to write).
    assert out.attempts_of(0) == {0, 1}, out.origins


@pytest.mark.timeout(1500)
def test_driver_killed_mid_batch_exactly_once(tmp: Path, eo_server: LiteServer) -> None:
    """The driver is SIGKILLed while executors append batch 1 (some chunks acked, others in flight; the
    executors may keep appending as zombies until the JVM dies) and restarted from its checkpoint with a
    different input split: the replay runs in recovery mode and writes each missing row exactly once.

    The zombies hold all of their partition's rows, so on a loaded machine they can finish batch 1 before the
    JVM goes down, leaving the restart nothing to write: then the scenario runs again (exactly-once is checked
    on every run), up to three times, until the restarted driver completes a batch the dead one left partly
    written."""
    origins: list[object] = []
    for run in range(3):
        out = run_scenario(
            tmp / f"run{run}",
            eo_server.endpoint,
            files=2,
            rows=150,
            rules=[DRIVER_KILLS[2] | {"batch": 1}],
            restart_overrides=REPARTITION_ON_RESTART,
            batch_max_records=10,
        )
        print(out.summary())
        assert out.exits == [-9, 0]
        assert out.exactly_once(), out.summary()
        # Batch 1 really written partly by the killed run and completed by the restarted one.
        if out.epochs_of(1) == {1, 2}:
            return
        origins.append(out.origins)
    pytest.fail(f"in three runs the killed driver's zombies wrote all of batch 1 first: {origins}")


@pytest.mark.timeout(900)
def test_driver_killed_mid_driver_write_exactly_once(tmp: Path, eo_server: LiteServer) -> None:
    """Small batches are written from the driver process itself; it is SIGKILLed while writing batch 1,
    before its sixth append (five written, one at a time), and restarted from its checkpoint with a different
    input split: the replay, again from the driver, is a recovery that fences the dead run's appends out,
    reads back what they wrote and writes each missing row exactly once."""
    out = run_scenario(
        tmp,
        eo_server.endpoint,
        files=2,
        rows=150,
        rules=[{"point": "before_append", "batch": 1, "partition": 0, "chunk": 5, "action": "kill_driver"}],
        restart_overrides=REPARTITION_ON_RESTART,
        batch_max_records=10,
        driver_write_max_rows=10_000,
        max_inflight_requests=1,  # the appends before the kill are acknowledged, the later ones never sent
    )
    print(out.summary())
    assert out.exits == [-9, 0]
    assert out.exactly_once(), out.summary()
    # Batch 1 was really written partly by the killed driver and completed by the restarted one.
    assert out.epochs_of(1) == {1, 2}, out.origins


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_driver_kills_at_every_driver_point_exactly_once(tmp: Path, eo_server: LiteServer) -> None:
    """The driver is SIGKILLed three times (before the ledger commit, after it but before Spark's commit,
    and mid-batch while executors append) and restarted from its checkpoint with a different input split;
    the replays write each missing row once and nothing twice."""
    out = run_scenario(
        tmp,
        eo_server.endpoint,
        files=5,
        rows=150,
        rules=DRIVER_KILLS,
        restart_overrides=REPARTITION_ON_RESTART,
        batch_max_records=10,
    )
    print(out.summary())
    assert out.exits == [-9, -9, -9, 0]
    assert out.exactly_once(), out.summary()


@pytest.mark.timeout(900)
def test_at_least_once_duplicates_under_the_same_driver_kills(tmp: Path, eo_server: LiteServer) -> None:
    """Control: the same pipeline and driver kills with delivery='at-least-once' lose nothing but do write
    duplicates (the replayed batches are appended again), so the exactly-once check can fail."""
    out = run_scenario(
        tmp,
        eo_server.endpoint,
        delivery="at-least-once",
        files=2,
        rows=150,
        rules=[DRIVER_KILLS[0]],
        restart_overrides=REPARTITION_ON_RESTART,
    )
    print(out.summary())
    assert out.exits == [-9, 0]
    assert out.missing == 0
    assert out.duplicates >= 150, out.summary()


class _FaultStorm:
    """Arms a random lite-server fault every `period` seconds while a driver runs."""

    def __init__(self, srv: LiteServer, seed: int, period: float = 1.0) -> None:
        self.srv, self.rng, self.period = srv, random.Random(seed), period
        self.armed: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        faults = self.srv.faults
        while not self._stop.wait(self.period):
            kind = self.rng.choice(["503", "drop", "ambiguous", "slow"])
            faults.clear()
            if kind == "503":
                faults.fail_next_appends(self.rng.randint(1, 3), status=503)
            elif kind == "drop":
                faults.drop_connections(after_appends=self.rng.randint(0, 5))
            elif kind == "ambiguous":
                faults.drop_connections(after_appends=self.rng.randint(0, 5), ambiguous=True)
            else:
                faults.delay_acks(self.rng.choice([50, 300]))
            self.armed.append(kind)

    def __enter__(self) -> _FaultStorm:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.srv.faults.clear()


@pytest.fixture
def storm(eo_server: LiteServer) -> Iterator[_FaultStorm]:
    with _FaultStorm(eo_server, seed=5) as s:
        yield s


@pytest.mark.timeout(600)
def test_server_faults_exactly_once(tmp: Path, eo_server: LiteServer, storm: _FaultStorm) -> None:
    """503 bursts, connections dropped before an append is applied, connections dropped after it is applied
    but before its ack (the ambiguous case), and slow acks, armed over and over during the run: possibly
    applied appends are never blindly re-sent, so each row is in the stream exactly once."""
    time.sleep(0)  # the storm is running
    out = run_scenario(tmp, eo_server.endpoint, files=3, rows=150, max_runs=3)
    print(out.summary(), "faults armed:", {k: storm.armed.count(k) for k in sorted(set(storm.armed))})
    assert len(storm.armed) >= 3
    assert out.exactly_once(), out.summary()


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_driver_kills_upsert_sharded_exactly_once(tmp: Path, eo_server: LiteServer) -> None:
    """The driver kills of the single-stream case, with the upsert encoder and 3 shards: each upsert row
    is exactly once across the shards."""
    out = run_scenario(
        tmp,
        eo_server.endpoint,
        encoder="upsert",
        shards=3,
        files=5,
        rows=150,
        rules=DRIVER_KILLS,
        restart_overrides=REPARTITION_ON_RESTART,
        # Small chunks, so partition 0 of the replayed batch 3 (laid out by content over all 3 shuffle
        # partitions) still has a chunk 1 per shard stream for the mid-batch kill to fire at.
        batch_max_records=10,
    )
    print(out.summary())
    assert out.exits == [-9, -9, -9, 0]
    assert out.exactly_once(), out.summary()


@pytest.mark.timeout(900)
def test_format_sink_task_retries_and_driver_kill_exactly_once(tmp: Path, eo_server: LiteServer) -> None:
    """writeStream.format("s2"): executor Python workers die in micro-batch 0 (Spark retries the tasks),
    then the driver and its JVM are SIGKILLed while batch 1 is being appended and the query restarts from its
    checkpoint with the same partitioning; the replay subtracts per partition what the dead execution wrote
    and writes the rest: every row once."""
    # The JVM dies with the driver; the Python workers already writing may go on as zombies until fenced.
    rules = [*EXECUTOR_CRASHES[:2], DRIVER_KILLS[2] | {"batch": 1, "action": "kill_driver_jvm"}]
    out = run_scenario(
        tmp, eo_server.endpoint, sink="format", files=2, rows=150, rules=rules, batch_max_records=10
    )
    print(out.summary())
    assert out.fired == len(rules)
    assert out.exits == [-9, 0]
    assert out.exactly_once(), out.summary()
    assert out.attempts_of(0) == {0, 1}, out.origins
    # Batch 0 had epoch 1; the killed execution of batch 1 continued it (planned by the same Python worker
    # after batch 0's commit; epoch 2 if another worker planned it); the replay after the restart opened the
    # next epoch. The killed execution wrote part of batch 1 (in 1 of 8 runs, all of it: its Python workers
    # outlived the kill; the replay then subtracted everything). tests/unit/exactly_once/test_sink_blocks.py
    # covers the completion.
    assert out.epochs_of(0) == {1}, out.origins
    killed = min(out.epochs_of(1))
    assert killed in {1, 2}, out.origins
    assert out.epochs_of(1) <= {killed, killed + 1}, out.origins


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_format_sink_driver_kills_at_the_commit_points_exactly_once(tmp: Path, eo_server: LiteServer) -> None:
    """writeStream.format("s2"): the driver is SIGKILLed from the sink's commit, once after every task of
    batch 0 succeeded but before the ledger commit (the replay subtracts what is there) and once after the
    ledger commit of batch 1 but before Spark's (the replay writes nothing): every row exactly once."""
    # The sink's commit runs in a Python worker: take the JVM and that worker down with the driver.
    rules = [DRIVER_KILLS[i] | {"batch": i, "action": "kill_driver_jvm"} for i in (0, 1)]
    out = run_scenario(
        tmp, eo_server.endpoint, sink="format", files=3, rows=100, rules=rules, batch_max_records=10
    )
    print(out.summary())
    assert out.fired == len(rules)
    assert out.exits == [-9, -9, 0]
    assert out.exactly_once(), out.summary()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("replay_partitioning", ["check", pytest.param("same", marks=pytest.mark.slow)])
def test_format_sink_replay_partitioned_differently(
    tmp: Path, eo_server: LiteServer, replay_partitioning: str
) -> None:
    """The driver and its JVM are SIGKILLed after partition 1 of micro-batch 1 wrote all its rows, and the
    restart splits the input differently: rows the dead execution wrote from partition 1 now belong to
    another partition, which cannot tell whose copy is in the stream. By default the replay fails with
    ReplayMismatchError instead of guessing, and nothing is duplicated; with s2.replay-partitioning=same (the
    user vouching, wrongly, for the partitioning) the run ends with duplicates: what the check prevents."""
    out = run_scenario(
        tmp,
        eo_server.endpoint,
        sink="format",
        files=2,
        rows=150,
        rules=[
            {"point": "after_ack_before_task_end", "batch": 1, "partition": 1, "action": "kill_driver_jvm"}
        ],
        restart_overrides=REPARTITION_ON_RESTART | {"replay_partitioning": replay_partitioning},
        batch_max_records=10,
        max_runs=2,
    )
    print(out.summary())
    assert out.exits[0] == -9
    if replay_partitioning == "same":
        assert out.exits[1] == 0
        assert out.duplicates > 0, out.summary()
        return
    assert out.exits[1] not in (0, -9)
    assert out.duplicates == 0, out.summary()
    assert "ReplayMismatchError" in (tmp / "driver-1.log").read_text()
