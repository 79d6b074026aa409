"""A Spark standalone cluster on this machine: one master and two workers, each its own JVM started with
the pip-installed pyspark's ``bin/spark-class`` (no Docker), everything on 127.0.0.1 and free ports.

Executors are JVMs the workers spawn (``CoarseGrainedExecutorBackend``), one per worker and application:
the topology where an executor can be lost with the shuffle files it holds (no external shuffle service),
which local mode cannot produce. Every process runs in its own process group, and `stop` kills the groups
(executors and their Python workers with them), then whatever still runs under the cluster's directory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pyspark

from tests.cluster._procs import alive, kill_group, started_under

ROOT = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    """A port nobody listens on now (bound and released: good enough for a test on loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.load(resp)


def spark_env(**extra: str) -> dict[str, str]:
    """The environment of every cluster process: loopback only, this checkout importable by executors'
    Python workers, and this interpreter as their Python."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    return env | {
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOCAL_HOSTNAME": "127.0.0.1",
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        **extra,
    }


class StandaloneCluster:
    """A master and `workers` workers of `cores` cores and `memory` each, under `directory`."""

    def __init__(self, directory: Path, *, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.directory = directory
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port = free_port()
        self.webui_port = free_port()
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def master_json_url(self) -> str:
        return f"http://127.0.0.1:{self.webui_port}/json/"

    def start(self, timeout: float = 120.0) -> None:
        """Start the master and the workers; return once every worker registered ALIVE with the master."""
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            self._start(timeout)
        except BaseException:  # an interrupt too: never leave JVMs behind
            self.stop()
            raise

    def _start(self, timeout: float) -> None:
        master = ["--host", "127.0.0.1", "--port", str(self.port), "--webui-port", str(self.webui_port)]
        self._spawn("master", "org.apache.spark.deploy.master.Master", master)
        for n in range(self.workers):
            work_dir = self.directory / f"worker-{n}"
            work_dir.mkdir(exist_ok=True)
            args = [self.master_url, "--host", "127.0.0.1", "--webui-port", str(free_port())]
            args += ["--cores", str(self.cores), "--memory", self.memory, "--work-dir", str(work_dir)]
            self._spawn(f"worker-{n}", "org.apache.spark.deploy.worker.Worker", args)
        self._wait_workers(timeout)

    def _spawn(self, name: str, main_class: str, args: list[str]) -> None:
        log = (self.directory / f"{name}.log").open("wb")
        proc = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), main_class, *args],
            cwd=self.directory,
            env=spark_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.procs.append(proc)

    def state(self) -> dict[str, Any]:
        """The master's view: workers, applications (``/json/`` of its web UI)."""
        doc: dict[str, Any] = get_json(self.master_json_url)
        return doc

    def alive_workers(self) -> int:
        try:
            workers = self.state()["workers"]
        except OSError:
            return 0
        return sum(1 for w in workers if w["state"] == "ALIVE")

    def _wait_workers(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while self.alive_workers() < self.workers:
            dead = [p.args for p in self.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                why = f"exited: {dead}" if dead else f"not all ALIVE after {timeout:.0f}s"
                raise RuntimeError(f"standalone cluster did not start ({why}); logs in {self.directory}")
            time.sleep(0.5)

    def stop(self) -> None:
        """Kill every process group we started, then anything left running under our directory."""
        for proc in self.procs:
            kill_group(proc.pid)
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid in started_under(self.directory):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
        deadline = time.monotonic() + 20
        while (
            left := [p for p in started_under(self.directory) if alive(p)]
        ) and time.monotonic() < deadline:
            time.sleep(0.2)
        if left:
            raise RuntimeError(f"processes still running under {self.directory}: {left}")

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
