"""S2Writer under Spark Connect (``SparkSession.builder.remote("local[2]")``), in a child process."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from s2_sink.lite import LiteServer
from tests.integration._s2read import read_stream
from tests.integration.conftest import run_connect_job

# A Spark Connect server starts in the child: allow more than the default per-test timeout.
pytestmark = [pytest.mark.connect, pytest.mark.slow, pytest.mark.timeout(600)]


def test_pipeline_under_spark_connect(lite: LiteServer, basin: str, tmp_path: Path) -> None:
    """A direct call and a streaming foreachBatch query both write through Connect (mapInArrow, no rdd)."""
    result = run_connect_job("tests.integration._connect_job", lite.endpoint, basin, str(tmp_path))
    assert result["session"].startswith("pyspark.sql.connect")
    assert result["query_exception"] is None
    assert result["direct_records"] == 500
    direct = read_stream(lite.endpoint, basin, "cx/direct")
    assert len(direct) == 500
    assert dict(direct[0].headers)[b"@action"] == b"u"
    even = [orjson.loads(r.body) for r in read_stream(lite.endpoint, basin, "cx/even")]
    odd = [orjson.loads(r.body) for r in read_stream(lite.endpoint, basin, "cx/odd")]
    assert sorted(r["id"] for r in even + odd) == list(range(1000))
    assert {r["region"] for r in even} == {"even"}
