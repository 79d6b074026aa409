"""The suite's switch to another S2 (`tests/s2_target.py`, ``make test-s2``), proven against the project's
lite server run as a separate process with a token of its own, as a user runs the official s2-lite."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "suite-switch-token"  # the server refuses any other: a test still using its own token fails
PREFIX = "switch"

pytestmark = [pytest.mark.slow, pytest.mark.spark]

# SDK conformance and end-to-end writer tests, one of them needing the lite server's fault hooks.
SELECTION = [
    "tests/lite/test_sdk_records.py",
    "tests/integration/test_writer_spark.py::test_streaming_query_insert_encoder",
    "tests/integration/test_writer_spark.py::test_retries_through_injected_503s",
]


def test_the_suite_runs_against_an_s2_the_environment_names(tmp_path: Path) -> None:
    """With S2_SINK_TEST_BASIN_PREFIX, S2_ACCESS_TOKEN and the endpoints naming a server in another process,
    the selected tests pass against it (its token refuses any other), the one needing fault hooks is
    skipped with that reason, and the run leaves no basin of its own there."""
    data = tmp_path / "data"
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "s2-sink-lite"),
            "--port",
            "0",
            "--token",
            TOKEN,
            "--data-dir",
            str(data),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        endpoint = server.stdout.readline().strip()
        env = {k: v for k, v in os.environ.items() if not k.startswith("S2_")}
        env.update(
            S2_SINK_TEST_BASIN_PREFIX=PREFIX,
            S2_ACCESS_TOKEN=TOKEN,
            S2_ACCOUNT_ENDPOINT=endpoint,
            S2_BASIN_ENDPOINT=endpoint,
            PYSPARK_PYTHON=sys.executable,
        )
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", *SELECTION],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-5000:]
        assert f"S2: {endpoint} (basins {PREFIX}-*" in out
        passed = int(re.search(r"(\d+) passed", out).group(1))  # type: ignore[union-attr]
        assert passed >= 3, out[-3000:]
        assert re.search(r"SKIPPED .*needs the project's lite server \(lite\.faults\)", out), out[-3000:]
        with httpx.Client(http2=True) as client:
            listed = client.get(
                f"{endpoint}/v1/basins",
                params={"prefix": f"{PREFIX}-"},
                headers={"authorization": f"Bearer {TOKEN}"},
            ).json()["basins"]
        assert [b["name"] for b in listed if not b.get("deleted_at")] == []
        log = (data / "lite.log").read_bytes()
        assert log.count(f"{PREFIX}-".encode()) >= passed  # the basins were made there, not elsewhere
    finally:
        server.terminate()
        server.wait(timeout=30)
