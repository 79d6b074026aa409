"""Spark fixtures for the integration tests (reused by every area).

Classic PySpark and Spark Connect cannot share a process: once a classic session exists,
``SparkSession.builder.remote("local[2]")`` refuses with ``SESSION_ALREADY_EXIST``, and stopping the
classic session first leaves the JVM unable to host the Connect server in practice. So the classic
``spark`` fixture is session-scoped and in-process, while Spark Connect runs in a child process
(`run_connect_job`), which starts ``remote("local[2]")`` itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

ROOT = Path(__file__).resolve().parents[2]

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.python.worker.reuse": "true",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
    "spark.sql.session.timeZone": "UTC",
}


def _quiet_env() -> None:
    # Executors must run this interpreter (the project's venv), not whatever python is on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One classic local[2] Spark session for the whole test run (UI off, 2 shuffle partitions)."""
    _quiet_env()
    builder = SparkSession.builder.master("local[2]").appName("s2-sink-tests")
    for key, value in SPARK_CONF.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def run_connect_job(module: str, *args: str, timeout: float = 540) -> dict[str, Any]:
    """Run ``python -m <module> <args>`` in a child process that uses ``SparkSession.builder.remote``;
    the job prints one JSON object on its last stdout line, returned here. Fails the test on error."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        out, err = proc.stdout[-3000:], proc.stderr[-5000:]
        pytest.fail(f"{module} exited {proc.returncode}\nstdout:\n{out}\nstderr:\n{err}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def connect_session() -> SparkSession:
    """A Spark Connect session on a local server (only in a process without a classic session)."""
    _quiet_env()
    builder = SparkSession.builder.remote("local[2]")
    for key in ("spark.sql.shuffle.partitions", "spark.sql.session.timeZone"):
        builder = builder.config(key, SPARK_CONF[key])
    return builder.getOrCreate()
