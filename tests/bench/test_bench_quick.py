"""The benchmark harness runs end to end in quick mode and reports every row (speed is not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASE_KEYS = [
    "noop",
    "json",
    "naive",
    "producer",
    "s2writer",
    "s2writer_eo",
    "s2writer_upsert",
    "s2writer_upsert_ordered",
    "datasource",
    "read_json",
    "read_s2",
]
STATUSES = {"ok", "not available"}

# Quick mode costs about 160 CPU-seconds (results.json's run_cpu_s), so at least a minute and a half on an
# idle 2-core machine; a shared one can take many times that, hence the generous limits.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(900)]


@dataclass(frozen=True)
class QuickRun:
    proc: subprocess.CompletedProcess[str]
    out: Path


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> QuickRun:
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    return QuickRun(proc, out)


def test_quick_run_succeeds_and_writes_both_files(quick_run: QuickRun) -> None:
    """`python -m benchmarks.run --quick` exits 0 and leaves results.json and a non-empty PNG chart."""
    proc = quick_run.proc
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (quick_run.out / "results.json").is_file()
    png = (quick_run.out / "results.png").read_bytes()
    assert png.startswith(b"\x89PNG")
    assert len(png) > 10_000


def test_results_hold_every_row(quick_run: QuickRun) -> None:
    """results.json holds every case (measured, or saying why not: never an error), the baselines measured,
    the streaming latencies (foreachBatch sinks, and format("s2") in both delivery modes), the
    single-partition memory case, the lite ingest rate, the routed section, the reads of many streams and
    all nineteen targets."""
    assert quick_run.proc.returncode == 0, quick_run.proc.stderr[-3000:]
    res = json.loads((quick_run.out / "results.json").read_text())
    assert [c["key"] for c in res["cases"]] == CASE_KEYS
    for c in res["cases"]:
        assert c["status"] in STATUSES, c
        if c["status"] == "ok":
            for field in ("rows_per_s", "mb_per_s", "py_cpu_us_per_rec", "worker_peak_rss_mib", "vs_json"):
                assert c[field] is not None, (c["key"], field)
                assert c[field] >= 0, (c["key"], field)
        else:
            assert c["reason"], c
    for baseline in ("noop", "json", "naive", "producer"):
        assert next(c for c in res["cases"] if c["key"] == baseline)["status"] == "ok", baseline
    sinks = res["streaming"]["sinks"]
    assert sinks["noop"]["status"] == "ok"
    assert sinks["noop"]["median_ms"] > 0
    assert set(sinks) >= {"noop", "naive", "s2writer", "s2writer_eo"}
    assert all(s["status"] in STATUSES for s in sinks.values()), sinks
    [fmt] = res["format_streaming"]  # writeStream.format("s2"), both deliveries, 1k-row batches
    assert set(fmt["modes"]) == {"at-least-once", "exactly-once"}, fmt
    assert all(m["median_ms"] > 0 for m in fmt["modes"].values()), fmt
    assert res["single_partition"]["status"] in STATUSES
    assert res["lite_ingest"]["status"] in STATUSES
    assert res["routed"]["status"] in STATUSES
    assert res["read_many"]["status"] in STATUSES
    assert len(res["targets"]) == 19
    assert all(t["status"] in {"pass", "fail", "n/a"} for t in res["targets"])


def test_printed_table_names_every_case(quick_run: QuickRun) -> None:
    """The printed table has a line for each of the ten cases and one per target (nineteen)."""
    out = quick_run.proc.stdout
    for i in range(1, 11):
        assert f"({i}) " in out
    assert out.count("(target ") == 19
