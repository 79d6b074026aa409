"""format("s2") under Spark Connect (Databricks serverless and shared clusters speak Connect).

The test runs this module as a child process (a classic and a Connect session cannot share one):

    python -m tests.integration.test_datasource_connect <endpoint> <basin> <workdir>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import run_connect_job

pytestmark = [pytest.mark.connect, pytest.mark.slow]


def main(endpoint: str, basin: str, workdir: str) -> dict[str, Any]:
    """Register, batch write, batch read and a stream-to-stream query, all through a Connect session."""
    import s2_sink
    from tests.integration.conftest import connect_session

    spark = connect_session()
    s2_sink.register(spark)
    conn = {"s2.basin": basin, "s2.endpoints.account": endpoint, "s2.endpoints.basin": endpoint}
    df = spark.range(100, numPartitions=2).selectExpr("id", "cast(id * 2 as string) AS name")
    df.write.format("s2").options(**conn).option("s2.stream", "cx/in").mode("append").save()

    back = (
        spark.read.format("s2")
        .options(**conn)
        .option("s2.stream", "cx/in")
        .option("s2.format", "json")
        .schema("id long, name string")
        .load()
    )
    ids = sorted(r.id for r in back.collect())

    query = (
        spark.readStream.format("s2")
        .options(**conn)
        .option("s2.stream", "cx/in")
        .load()
        .select("body")
        .writeStream.format("s2")
        .options(**conn)
        .option("s2.stream", "cx/out")
        .option("s2.format", "raw")
        .option("s2.value-column", "body")
        .option("checkpointLocation", f"{workdir}/ckpt")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    exc = query.exception()
    copied = spark.read.format("s2").options(**conn).option("s2.stream", "cx/out").load().count()
    # The streaming write is exactly-once by default: its ledger is named after the query id.
    ledger = spark.read.format("s2").options(**conn).option("s2.stream", f"_s2sink/ledger/{query.id}").load()
    out = {
        "session": type(spark).__module__,
        "ids": ids == list(range(100)),
        "copied": copied,
        "ledger": [json.loads(bytes(r.body))["kind"] for r in ledger.orderBy("seq_num").collect()],
        "query_exception": None if exc is None else str(exc)[:2000],
    }
    spark.stop()
    return out


def test_format_s2_under_spark_connect(lite: Any, tmp_path: Path) -> None:
    """Through a Connect session, format("s2") registers, writes, reads back the same rows, and runs a
    streaming s2 -> s2 query, exactly-once with its ledger (no rdd or SparkContext needed)."""
    from tests.integration.test_datasource_read import new_basin

    basin = new_basin(lite.endpoint, "cx/in", "cx/out")
    result = run_connect_job("tests.integration.test_datasource_connect", lite.endpoint, basin, str(tmp_path))
    assert result["session"].startswith("pyspark.sql.connect")
    assert result["query_exception"] is None
    assert result["ids"] is True
    assert result["copied"] == 100
    assert result["ledger"][:2] == ["open", "commit"], result["ledger"]
    assert result["ledger"][-1] == "commit", result["ledger"]


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
