"""Every notebook under notebooks/ runs top to bottom, so a broken notebook fails the suite.

The kernel is this interpreter (the project's virtualenv): a kernelspec pointing at `sys.executable` is
written to a temporary Jupyter path, so the test needs no `jupyter kernelspec install` on a fresh clone.
The S2_* variables are removed from the kernel's environment so the notebooks use their embedded lite
server here, whatever the developer's shell exports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = [pytest.mark.slow, pytest.mark.spark]

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
KERNEL = "s2sink-test-python"
# Generous for a shared 2-core machine; each notebook takes well under a minute when the machine is idle.
CELL_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for the notebook kernels: a Jupyter path holding a kernelspec for this python."""
    jupyter = tmp_path_factory.mktemp("jupyter")
    spec = jupyter / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "s2_sink (.venv)", "language": "python"})
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("S2_")}
    env["JUPYTER_PATH"] = os.pathsep.join([str(jupyter), env.get("JUPYTER_PATH", "")]).rstrip(os.pathsep)
    env["MPLBACKEND"] = "Agg"
    return env


def test_notebooks_match_their_sources() -> None:
    """Each .ipynb is exactly what notebooks/build.py builds from its sources/ file, and none is orphaned."""
    proc = subprocess.run(
        [sys.executable, str(NOTEBOOK_DIR / "build.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    sources = {p.stem for p in (NOTEBOOK_DIR / "sources").glob("[0-9]*.py")}
    assert {p.stem for p in NOTEBOOKS} <= sources


def test_notebooks_are_stored_without_outputs() -> None:
    """Notebooks are committed with outputs and execution counts stripped (they are produced by running)."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [], f"{path.name}: a code cell has outputs"
                assert cell.execution_count is None, f"{path.name}: a code cell has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(
    path: Path, kernel_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notebook executes without an error in any cell (its own asserts included), on the lite server."""
    monkeypatch.setenv("JUPYTER_PATH", kernel_env["JUPYTER_PATH"])
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb,
        kernel_name=KERNEL,
        timeout=CELL_TIMEOUT_S,
        startup_timeout=120,
        resources={"metadata": {"path": str(tmp_path)}},
    )
    started = time.monotonic()
    client.execute(env=kernel_env, cwd=str(tmp_path))
    elapsed = time.monotonic() - started
    print(f"{path.name}: {elapsed:.1f}s")


def test_databricks_job_runs_locally(kernel_env: dict[str, str], tmp_path: Path) -> None:
    """The Databricks job, run as a plain script off Databricks, writes to an embedded lite server."""
    job = NOTEBOOK_DIR / "04_databricks_job.py"
    # This first line makes a Databricks workspace import the file as a notebook.
    assert job.read_text().startswith("# Databricks notebook source\n")
    proc = subprocess.run(
        [sys.executable, str(job), "--rows", "1500", "--checkpoint", str(tmp_path / "checkpoint")],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=kernel_env,
        timeout=CELL_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "micro-batches: 1, records appended: 1500" in proc.stdout, proc.stdout[-3000:]
