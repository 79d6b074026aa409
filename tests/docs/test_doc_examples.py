"""Every Python block of the project's markdown (`_blocks.doc_files`) runs as written, with only what the lite
server prints.

The lite server is started as the README starts it (``s2-sink-lite --basin my-basin``); the blocks run in one
child process (one ``local[2]`` Spark session for all of them) whose environment is this one plus the
``export`` line the server printed, so the first example works exactly as the README says it does. After all
of them, the README's quick start runs once more in the same directory, as a user who runs it twice.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.docs._blocks import ROOT, Block, python_blocks

BLOCKS = python_blocks()
RUNNABLE = [b for b in BLOCKS if b.runnable]
BASIN = "my-basin"
AGAIN = " (again)"


def _quick_start() -> list[Block]:
    """The README's Python blocks under its "Quick start, locally" heading."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    start = lines.index("## Quick start, locally") + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("## ")) + 1
    return [b for b in RUNNABLE if b.path == "README.md" and start < b.line < end]


QUICK_START = _quick_start()

# Blocks deliberately not run, by file and first line: adding one to the docs means adding it here.
NOT_RUN: set[tuple[str, str]] = set()


def _exports(stderr_path: Path, proc: subprocess.Popen[str], timeout: float = 30) -> dict[str, str]:
    """The variables of the ``export`` line the server printed on stderr."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in stderr_path.read_text().splitlines():
            if line.startswith("export "):
                return dict(word.split("=", 1) for word in shlex.split(line)[1:])
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    pytest.fail(f"the lite server printed no export line:\n{stderr_path.read_text()}")


@pytest.fixture(scope="module")
def lite_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """`s2-sink-lite --port 0 --basin my-basin` (the installed script) in a child process, and the exports it
    prints."""
    stderr_path = tmp_path_factory.mktemp("lite") / "stderr"
    with stderr_path.open("w") as err:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "s2-sink-lite"), "--port", "0", "--basin", BASIN],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        endpoint = proc.stdout.readline().strip()
        assert endpoint.startswith("http://127.0.0.1:"), stderr_path.read_text()
        env = _exports(stderr_path, proc)
        assert env["S2_ACCOUNT_ENDPOINT"] == env["S2_BASIN_ENDPOINT"] == endpoint
        yield env
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def results(lite_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Run every runnable block in one child process, in a fresh directory; its results by block id."""
    work = tmp_path_factory.mktemp("docs")
    blocks_path, results_path = work / "blocks.json", work / "results.json"
    runs = [(b.id, b) for b in RUNNABLE] + [(b.id + AGAIN, b) for b in QUICK_START]
    blocks_path.write_text(
        json.dumps([{"id": run_id, "path": b.path, "line": b.line, "code": b.code} for run_id, b in runs])
    )
    run_dir = work / "cwd"
    run_dir.mkdir()
    env = {
        **os.environ,
        **lite_env,
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.docs._run_blocks", str(blocks_path), str(results_path)],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
        check=False,
    )
    got: dict[str, Any] = json.loads(results_path.read_text()) if results_path.exists() else {}
    if done.returncode != 0:
        got["_crash"] = f"exit {done.returncode}\n{done.stderr[-4000:]}"
    return got


def test_blocks_are_found() -> None:
    """The extractor sees the README's blocks and the docs' (a broken fence would hide them from the test)."""
    files = {b.path for b in BLOCKS}
    assert "README.md" in files
    assert len(RUNNABLE) >= 5


def test_blocks_not_run_are_declared() -> None:
    """Every ``python no-run`` block is listed in NOT_RUN, so none stops running unnoticed."""
    declared = {(b.path, b.first_line) for b in BLOCKS if not b.runnable}
    print(f"{len(RUNNABLE)} blocks run, {len(declared)} not run: {sorted(declared)}")
    assert declared == NOT_RUN


@pytest.mark.spark
@pytest.mark.timeout(600)  # the first block's test waits for the child that runs them all
@pytest.mark.parametrize("block", RUNNABLE, ids=[b.id for b in RUNNABLE])
def test_block_runs(block: Block, results: dict[str, Any]) -> None:
    """The block runs to its end without an error and leaves no streaming query running."""
    result = results.get(block.id)
    if result is None:
        pytest.fail(f"{block.id} did not run: {results.get('_crash', 'the runner stopped before it')}")
    assert result["ok"], f"{block.id} failed:\n{result['error']}\n--- the block ---\n{block.code}"


def _printed_comment(code: str) -> list[str]:
    """The words of the comment on the block's ``print(...)`` line that says what it prints."""
    (line,) = [line for line in code.splitlines() if line.startswith("print(") and "#" in line]
    return line.rsplit("#", 1)[1].split()


@pytest.mark.spark
@pytest.mark.timeout(600)
def test_readme_quick_start_run_twice_reads_back_what_it_wrote_once(results: dict[str, Any]) -> None:
    """The quick start's blocks, run a second time in the same directory against the same server (its input
    files, its checkpoint and its stream still there), run without error, and the read-back prints what its
    comment says both times: the second run wrote nothing again."""
    (read,) = [b for b in QUICK_START if 'format("s2")' in b.code and "count()" in b.code]
    expected = _printed_comment(read.code)
    for block in QUICK_START:
        again = results.get(block.id + AGAIN)
        assert again is not None, results.get("_crash", "the runner stopped before the second run")
        assert again["ok"], f"{block.id}, second run, failed:\n{again['error']}"
    assert results[read.id]["stdout"].split() == expected
    assert results[read.id + AGAIN]["stdout"].split() == expected
