"""The Databricks example job's entry point (``s2-orders-job``) on local Spark, against the lite server."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from s2_sink.lite import LiteServer
from tests.integration._s2read import read_stream

# Two streaming runs on the shared session: about 20 s idle, 57 s measured on 2 busy cores.
pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXAMPLE_SRC = Path(__file__).resolve().parents[2] / "examples" / "databricks" / "src"


def test_two_scheduled_runs_of_the_example_job_write_each_row_once(
    spark: object, lite: LiteServer, basin: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The entry point's parameters as the bundle passes them: each run drains the new files and stops; a
    second run over the same checkpoint adds only the file that landed since, and S2_ACCESS_TOKEN (as a job
    cluster sets it from the secret scope) is what the writer uses."""
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    from s2_orders_job.job import main

    monkeypatch.setenv("S2_ACCESS_TOKEN", "from-the-secret-scope")
    monkeypatch.setenv("S2_ACCOUNT_ENDPOINT", lite.endpoint)
    monkeypatch.setenv("S2_BASIN_ENDPOINT", lite.endpoint)
    landing = tmp_path / "landing"
    landing.mkdir()
    args = [
        "--source-path", str(landing), "--schema", "id long, amount double",
        "--basin", basin, "--stream", "orders",
        "--checkpoint", str(tmp_path / "checkpoint"), "--writer-id", "orders-to-s2-v1",
    ]  # fmt: skip
    for run in range(2):
        rows = [{"id": run * 100 + i, "amount": i * 1.5} for i in range(100)]
        (landing / f"part-{run}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
        assert main(args) == 0
    ids = [orjson.loads(r.body)["id"] for r in read_stream(lite.endpoint, basin, "orders")]
    assert sorted(ids) == list(range(200))
