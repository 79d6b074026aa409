"""Runs one cluster scenario: the input file, a crash plan, a driver process on the standalone cluster, and a
read-back that counts every input id in the target stream."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster._cluster import ROOT, StandaloneCluster, free_port, spark_env
from tests.cluster._gates import Victim
from tests.cluster._procs import alive, executor_pids, kill_group
from tests.faults._harness import Outcome, _ids_in, target_streams, write_inputs
from tests.faults._support import make_basin

RESULTS: list[str] = []
"""One line per scenario run in this session, for the end-of-run report (expected failures included)."""


class NotExactlyOnceError(AssertionError):
    """The stream does not hold every row exactly once (its own type, so an expected failure can name it
    and a fault that did not fire still fails the test)."""


@dataclass
class ClusterOutcome:
    """What a scenario produced: the counts, and what Spark and the crash plan say happened."""

    counts: Outcome
    exit_code: int
    evidence: dict[str, Any]
    armed: dict[str, Any] | None
    fired: int
    log: Path
    stages: list[dict[str, Any]] = field(default_factory=list)

    def stage_retries(self) -> list[tuple[int, int]]:
        """(stage, attempt) of every stage attempt after the first: Spark resubmitted that stage."""
        return [(s["stage"], s["attempt"]) for s in self.evidence.get("stages", []) if s["attempt"] > 0]

    def task_errors(self) -> list[str]:
        return [t["error"] for s in self.evidence.get("stages", []) for t in s["tasks"] if t["error"]]

    def lost_executors(self) -> list[dict[str, Any]]:
        return [e for e in self.evidence.get("executors", []) if e["id"] != "driver" and not e["active"]]

    def assert_exactly_once(self) -> None:
        if not self.counts.exactly_once():
            raise NotExactlyOnceError(self.summary())

    def brief(self) -> str:
        c = self.counts
        return (
            f"rows={sum(c.expected.values())} found={sum(c.found.values())} duplicates={c.duplicates} "
            f"missing={c.missing} exit={self.exit_code} fired={self.fired} "
            f"stage retries={self.stage_retries()} lost executors={len(self.lost_executors())} "
            f"in {c.seconds:.0f}s"
        )

    def summary(self) -> str:
        return (
            f"{self.counts.summary()}; driver exit={self.exit_code} armed={self.armed} fired={self.fired} "
            f"stage retries={self.stage_retries()} lost executors={self.lost_executors()} "
            f"runs={self.evidence.get('runs')} task errors={self.task_errors()[:4]} (driver log {self.log})"
        )


def run_on_cluster(
    cluster: StandaloneCluster,
    tmp: Path,
    endpoint: str,
    *,
    name: str,
    delivery: str = "exactly-once",
    victim: Victim = "none",
    rows: int = 4000,
    restarts: int = 0,
    max_failures: int = 4,
    rules: list[dict[str, Any]] | None = None,
    timeout: float = 420.0,
) -> ClusterOutcome:
    """Write `rows` rows (one micro-batch) from a driver process on `cluster` and count them in the stream."""
    started = time.monotonic()
    basin = make_basin(endpoint)
    expected = write_inputs(tmp / "input", 1, rows)
    shared = tmp / "shared"
    shared.mkdir()
    plan = tmp / "crash-plan.json"
    plan.write_text(json.dumps({"rules": rules or []}))
    scn = {
        "name": name,
        "master": cluster.master_url,
        "ui_port": free_port(),
        "endpoint": endpoint,
        "basin": basin,
        "stream": "events",
        "delivery": delivery,
        "victim": victim,
        "restarts": restarts,
        "max_failures": max_failures,
        "input_dir": str(tmp / "input"),
        "checkpoint": str(tmp / "checkpoint"),
        "shared": str(shared),
        "plan": str(plan),
        "evidence": str(tmp / "evidence.json"),
        "pythonpath": str(ROOT),
    }
    (tmp / "scenario.json").write_text(json.dumps(scn))
    log_path = tmp / "driver.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.cluster._driver", str(tmp / "scenario.json")],
            cwd=ROOT,
            env=spark_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=timeout)
        finally:
            kill_group(proc.pid)  # the driver's JVM too, whatever happened
            proc.wait()
    evidence = json.loads((tmp / "evidence.json").read_text()) if (tmp / "evidence.json").exists() else {}
    _wait_executors_gone(evidence.get("app_id"))
    found, origins = _ids_in(endpoint, basin, target_streams(endpoint, basin))
    fired = len(list(tmp.glob("crash-plan.json.fired.*")))
    counts = Outcome(expected, found, [code], fired, time.monotonic() - started, origins)
    armed_file = shared / "armed"
    armed = json.loads(armed_file.read_text()) if armed_file.exists() else None
    out = ClusterOutcome(counts, code, evidence, armed, fired, log_path)
    RESULTS.append(f"{name}: {out.brief()}")
    return out


def _wait_executors_gone(app_id: str | None, timeout: float = 60.0) -> None:
    """The workers stop an application's executors once its driver is gone: wait for that, so the next
    scenario has the cluster to itself."""
    if not app_id:
        return
    deadline = time.monotonic() + timeout
    while (left := [p for p in executor_pids(app_id) if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.5)
    if left:
        raise RuntimeError(f"executors of {app_id} still running after {timeout:.0f}s: {left}")
