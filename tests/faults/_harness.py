"""Runs fault scenarios: input files, a crash plan, a driver process restarted until it finishes, and a
read-back that counts every input id in the target stream(s)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from s2_sink._exactly_once.tags import find_tag
from tests.faults._support import list_streams, make_basin, read_all, run

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    """What a scenario produced."""

    expected: Counter[int]
    found: Counter[int]
    exits: list[int] = field(default_factory=list)
    fired: int = 0
    seconds: float = 0.0
    origins: Counter[tuple[int, int, int]] = field(default_factory=Counter)
    """Records per (batch, epoch, attempt) according to their chunk tags (exactly-once writes only)."""

    def epochs_of(self, batch: int) -> set[int]:
        """The runs (epochs) whose appends hold records of micro-batch `batch`."""
        return {e for (b, e, _), n in self.origins.items() if b == batch and n}

    def attempts_of(self, batch: int) -> set[int]:
        """The task attempts whose appends hold records of micro-batch `batch`."""
        return {a for (b, _, a), n in self.origins.items() if b == batch and n}

    @property
    def duplicates(self) -> int:
        return sum(n - 1 for n in self.found.values() if n > 1)

    @property
    def missing(self) -> int:
        return sum(1 for i in self.expected if self.found[i] == 0)

    @property
    def unexpected(self) -> int:
        return sum(1 for i in self.found if i not in self.expected)

    def exactly_once(self) -> bool:
        return self.found == self.expected

    def summary(self) -> str:
        return (
            f"rows expected={sum(self.expected.values())} found={sum(self.found.values())} "
            f"duplicates={self.duplicates} missing={self.missing} unexpected={self.unexpected} "
            f"driver exits={self.exits} crash points fired={self.fired} in {self.seconds:.1f}s"
        )


def write_inputs(directory: Path, files: int, rows: int) -> Counter[int]:
    """`files` JSON-lines files of `rows` rows each, with a unique ``id``; returns the id multiset."""
    directory.mkdir(parents=True, exist_ok=True)
    ids: Counter[int] = Counter()
    for f in range(files):
        lines = []
        for r in range(rows):
            i = f * rows + r
            ids[i] += 1
            lines.append(json.dumps({"id": i, "k": f"key-{i}", "v": f"value-{i % 7}"}))
        # Names sort in creation order, so micro-batch n reads file n (replayable, deterministic).
        (directory / f"part-{f:05d}.json").write_text("\n".join(lines) + "\n")
    return ids


def _ids_in(
    endpoint: str, basin: str, streams: list[str]
) -> tuple[Counter[int], Counter[tuple[int, int, int]]]:
    found: Counter[int] = Counter()
    origins: Counter[tuple[int, int, int]] = Counter()
    for stream in streams:
        origin, left = (-1, -1, -1), 0
        for rec in run(read_all(endpoint, basin, stream)):
            found[int(orjson.loads(rec.body)["id"])] += 1
            tag = find_tag(rec.headers)
            if left == 0 and tag is not None:
                origin, left = (tag.batch, tag.epoch, tag.attempt), tag.count
            if left:
                origins[origin] += 1
                left -= 1
    return found, origins


def target_streams(endpoint: str, basin: str) -> list[str]:
    return [s for s in run(list_streams(endpoint, basin)) if not s.startswith("_s2sink/")]


def _wait_gone(pid_file: Path, timeout: float = 20.0) -> None:
    """Wait for a dead driver's JVM to exit (it stops when its Python parent's pipe closes)."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return


def run_scenario(
    tmp: Path,
    endpoint: str,
    *,
    delivery: str = "exactly-once",
    encoder: str = "insert",
    shards: int | None = None,
    files: int = 4,
    rows: int = 120,
    rules: list[dict[str, Any]] | None = None,
    restart_overrides: dict[str, Any] | None = None,
    max_runs: int = 6,
    timeout: float = 240.0,
    faults: Any = None,
    **extra: Any,
) -> Outcome:
    """Run the query until it exits 0 (restarting after each crash) and count ids in the stream(s).

    `restart_overrides` change the scenario for runs after the first (e.g. a different file split size,
    so the replayed batch is partitioned differently). `faults`, if given, is called with the run number
    before each run (to arm lite server faults).
    """
    started = time.monotonic()
    basin = make_basin(endpoint)
    expected = write_inputs(tmp / "input", files, rows)
    scn: dict[str, Any] = {
        "endpoint": endpoint,
        "basin": basin,
        "stream": "events",
        "shards": shards,
        "encoder": encoder,
        "delivery": delivery,
        "input_dir": str(tmp / "input"),
        "checkpoint": str(tmp / "checkpoint"),
        **extra,
    }
    plan = tmp / "crash-plan.json"
    plan.write_text(json.dumps({"rules": rules or []}))
    env = {
        **os.environ,
        "S2SINK_CRASH_PLAN": str(plan),
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    exits: list[int] = []
    for n in range(max_runs):
        doc = scn if n == 0 or not restart_overrides else {**scn, **restart_overrides}
        (tmp / "scenario.json").write_text(json.dumps(doc))
        if faults is not None:
            faults(n)
        log = (tmp / f"driver-{n}.log").open("w")
        proc = subprocess.run(
            [sys.executable, "-m", "tests.faults._driver", str(tmp / "scenario.json")],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout,
            check=False,
        )
        exits.append(proc.returncode)
        _wait_gone(Path(str(plan) + ".jvm_pid"))
        if proc.returncode == 0:
            break
    fired = len(list(tmp.glob("crash-plan.json.fired.*")))
    found, origins = _ids_in(endpoint, basin, target_streams(endpoint, basin))
    return Outcome(expected, found, exits, fired, time.monotonic() - started, origins)
