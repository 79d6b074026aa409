"""Exactly-once on a real Spark standalone cluster: a master and two workers, each executor its own JVM.

Each scenario writes 4,000 rows (one micro-batch, shuffled by ``repartition(4)`` before the write) through
``foreachBatch(S2Writer)`` into a lite server, with a fault local mode cannot produce: an executor JVM
SIGKILLed from inside a write task right after S2 acknowledged chunk 1 of its partition, either one that
holds no shuffle output (Spark retries the task: attempt 1) or the one holding the shuffle output the
writing stage reads (its retry hits FetchFailed and Spark retries the whole stage, where task attempt
numbers start again at 0, SPARK-24552). Then every row of the target stream is counted. Every test also
checks, from the crash plan and Spark's REST API, that its fault really fired.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from s2_sink.lite import LiteServer
from tests.cluster._cluster import StandaloneCluster
from tests.cluster._scenario import ClusterOutcome, run_on_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.faults, pytest.mark.timeout(900)]

ROWS = 4000


def _executor_killed(out: ClusterOutcome) -> None:
    """The armed executor JVM died of SIGKILL (exit 137) and Spark saw it lost."""
    assert out.armed is not None, out.summary()
    assert out.fired == 1, out.summary()
    lost = {e["id"]: e["removed"] for e in out.lost_executors()}
    assert "137" in lost.get(out.armed["executor_id"], ""), out.summary()


def _task_retried_in_place(out: ClusterOutcome) -> None:
    """No stage retry: the killed partition ran again as task attempt 1 of the same stage attempt."""
    assert out.armed is not None, out.summary()
    assert out.stage_retries() == [], out.summary()
    retries = [
        t
        for s in out.evidence["stages"]
        if s["stage"] == out.armed["stage"]
        for t in s["tasks"]
        if t["partition"] == out.armed["partition"] and t["attempt"] == 1 and t["status"] == "SUCCESS"
    ]
    assert retries, out.summary()


def test_executor_killed_mid_write_at_least_once_duplicates(
    cluster: StandaloneCluster, cluster_server: LiteServer, scenario_dir: Path
) -> None:
    """Control: with delivery='at-least-once', an executor (holding no shuffle output) SIGKILLed after
    chunk 1 of its partition was acknowledged loses nothing, and the retried task appends the partition
    again: duplicates, so the exactly-once tests below can tell the modes apart."""
    out = run_on_cluster(
        cluster,
        scenario_dir,
        cluster_server.endpoint,
        name="alo-kill",
        delivery="at-least-once",
        victim="no-map-output",
        rows=ROWS,
    )
    print(out.summary())
    _executor_killed(out)
    _task_retried_in_place(out)
    assert out.exit_code == 0, out.summary()
    assert out.counts.missing == 0, out.summary()
    assert out.counts.duplicates > 0, out.summary()


def test_executor_killed_mid_write_exactly_once(
    cluster: StandaloneCluster, cluster_server: LiteServer, scenario_dir: Path
) -> None:
    """The same executor SIGKILL with delivery='exactly-once' (the default): the retried task (attempt 1)
    subtracts what the dead attempt wrote, so every row is in the stream exactly once."""
    out = run_on_cluster(
        cluster, scenario_dir, cluster_server.endpoint, name="eo-kill", victim="no-map-output", rows=ROWS
    )
    print(out.summary())
    _executor_killed(out)
    _task_retried_in_place(out)
    assert out.exit_code == 0, out.summary()
    out.assert_exactly_once()


def test_fetch_failed_stage_retry_exactly_once(
    cluster: StandaloneCluster, cluster_server: LiteServer, scenario_dir: Path
) -> None:
    """The executor holding the shuffle output the writing stage reads is SIGKILLed after chunk 1 of its
    partition was acknowledged: the partition's retry hits FetchFailed, Spark reruns the map stage and
    retries the writing stage, whose tasks start again at attempt 0. The retry's attempt of the partition
    finds the earlier attempt's sign-in, reads back and subtracts: no duplicates, no losses."""
    out = run_on_cluster(
        cluster,
        scenario_dir,
        cluster_server.endpoint,
        name="eo-fetch-failed",
        victim="map-output-holder",
        rows=ROWS,
    )
    print(out.summary())
    _executor_killed(out)
    assert out.armed is not None
    assert out.armed["holds_map_output"], out.summary()
    assert (out.armed["stage"], 1) in out.stage_retries(), out.summary()
    assert any(e.startswith("FetchFailed") for e in out.task_errors()), out.summary()
    assert out.exit_code == 0, out.summary()
    out.assert_exactly_once()


def test_same_process_same_writer_restart_exactly_once(
    cluster: StandaloneCluster, cluster_server: LiteServer, scenario_dir: Path
) -> None:
    """Micro-batch 0 fails (partition 3's Python worker dies before its first append, with
    spark.task.maxFailures=1) after other partitions wrote; the driver starts the query again in the same
    Python process with the same S2Writer object, as a notebook re-running its cell. Spark replays batch 0
    and every row ends up in the stream exactly once."""
    out = run_on_cluster(
        cluster,
        scenario_dir,
        cluster_server.endpoint,
        name="eo-same-writer-restart",
        rows=ROWS,
        restarts=1,
        max_failures=1,
        rules=[{"point": "before_append", "partition": 3, "chunk": 0, "action": "exit"}],
    )
    print(out.summary())
    runs = out.evidence.get("runs", [])
    assert out.fired == 1, out.summary()
    assert [r["failed"] is None for r in runs] == [False, True], out.summary()
    assert out.exit_code == 0, out.summary()
    out.assert_exactly_once()
