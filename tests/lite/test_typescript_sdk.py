"""The official TypeScript SDK (``@s2-dev/streamstore`` from npm) against ``python -m s2_sink.lite``.

Skipped when node or npm is missing or the package cannot be installed (no network). The package is installed
once into a cache directory outside the repository and reused; ``typescript/flow.mjs`` is the flow it runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from s2_sink.lite import LiteServer
from s2_sink.testing import unique_basin_name

PACKAGE = "@s2-dev/streamstore@^0.27"
FLOW = Path(__file__).parent / "typescript" / "flow.mjs"
STEPS = [
    "create basin and stream",
    "unary append and read",
    "fencing and match_seq_num errors",
    "append session",
    "bounded read session",
    "bounded read session",
    "416 past the tail",
    "done",
]


def _cache_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "s2-sink-tests" / "typescript-sdk"


@pytest.fixture(scope="module")
def sdk_dir() -> Path:
    """A directory whose node_modules holds the SDK (installed on first use, with a timeout)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the TypeScript SDK suite")
    cache = _cache_dir()
    if not (cache / "node_modules" / "@s2-dev" / "streamstore" / "package.json").exists():
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "package.json").write_text('{"name": "s2-sink-ts-flow", "private": true}\n')
        try:
            done = subprocess.run(
                [npm, "install", "--no-audit", "--no-fund", PACKAGE],
                cwd=cache,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pytest.skip(f"npm install {PACKAGE} timed out")
        if done.returncode != 0:
            pytest.skip(f"npm install {PACKAGE} failed: {done.stderr.strip()[-300:]}")
    shutil.copy(FLOW, cache / FLOW.name)
    return cache


def test_typescript_sdk_basic_flow(sdk_dir: Path) -> None:
    """Basin and stream creation, unary append/read, fencing and match_seq_num errors, an append session,
    bounded read sessions over S2S and over SSE, and 416 past the tail all pass with the official SDK."""
    with LiteServer(subprocess=True) as srv:
        done = subprocess.run(
            ["node", FLOW.name, srv.endpoint, unique_basin_name("ts")],
            cwd=sdk_dir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    steps = [json.loads(line)["step"] for line in done.stdout.splitlines() if line.startswith("{")]
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    assert steps == STEPS
