"""The serverless job shape: Spark Connect, ``trigger(availableNow=True)``, five scheduled runs of one query
restarted from its checkpoint, one of them killed mid-batch, and every row in the stream exactly once."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from s2_sink.lite import LiteServer
from tests.integration._s2read import read_stream
from tests.integration._scheduled_job import CRASHED_RUN, ROWS_PER_RUN, RUNS
from tests.integration.conftest import run_connect_job

# A Spark Connect server and five query starts in the child: allow more than the default per-test timeout.
pytestmark = [pytest.mark.connect, pytest.mark.slow, pytest.mark.timeout(600)]


def test_five_scheduled_available_now_runs_write_every_row_once(
    lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """Each run drains the file that landed before it and stops; the run whose Python worker died after an
    append and before its ack fails, the next run replays that micro-batch from the checkpoint and writes
    only what the ledger says is missing: the stream holds each of the 3,000 rows once, in run order."""
    result = run_connect_job("tests.integration._scheduled_job", lite.endpoint, basin, str(tmp_path))
    assert result["session"].startswith("pyspark.sql.connect")
    runs = result["runs"]
    assert len(runs) == RUNS
    assert result["crash_fired"], "the crash point did not fire, so the replay was not exercised"
    assert runs[CRASHED_RUN]["error"], "the run whose worker was killed did not fail"
    assert [r["error"] for i, r in enumerate(runs) if i != CRASHED_RUN] == [None] * (RUNS - 1)
    # Run k drains micro-batch k; the run after the failed one replays its batch, then drains its own file.
    assert runs[0]["batches"] == [0]
    assert runs[CRASHED_RUN + 1]["batches"] == [CRASHED_RUN, CRASHED_RUN + 1]
    assert runs[-1]["batches"] == [RUNS - 1]
    rows = [orjson.loads(r.body) for r in read_stream(lite.endpoint, basin, "orders")]
    ids = [row["id"] for row in rows]
    assert len(ids) == RUNS * ROWS_PER_RUN, f"{len(ids) - len(set(ids))} duplicates, {len(set(ids))} distinct"
    assert sorted(ids) == list(range(RUNS * ROWS_PER_RUN))
    runs_in_stream_order = [row["run"] for row in rows]
    assert runs_in_stream_order == sorted(runs_in_stream_order)
