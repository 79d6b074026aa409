"""The writer pipeline under Spark Connect, run in its own process by test_writer_connect.py.

    python -m tests.integration._connect_job <endpoint> <basin> <workdir>

Prints one JSON line with what it observed; the test reads the streams back itself.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import functions as F

from s2_sink import S2Config, S2Writer
from s2_sink.encoders import InsertEncoder, UpsertEncoder
from tests.integration.conftest import connect_session


def main(endpoint: str, basin: str, workdir: str) -> dict[str, object]:
    """Direct call and streaming foreachBatch, both through a Connect session."""
    spark = connect_session()
    out: dict[str, object] = {"session": type(spark).__module__}
    cfg = S2Config(
        basin=basin,
        stream="cx/direct",
        access_token="test",
        account_endpoint=endpoint,
        basin_endpoint=endpoint,
    )
    rows = spark.range(500, numPartitions=2).withColumn(
        "region", F.when(F.col("id") % 2 == 0, F.lit("even")).otherwise(F.lit("odd"))
    )
    direct = S2Writer(cfg, UpsertEncoder(key_columns=["id"]), delivery="at-least-once")
    direct(rows, 0)
    assert direct.last_metrics is not None
    out["direct_records"] = direct.last_metrics.records

    src = f"{workdir}/src"
    for i in range(2):
        rows.withColumn("id", F.col("id") + i * 500).coalesce(1).write.mode("append").parquet(src)
    streaming = S2Writer(
        cfg.replace(stream=None), InsertEncoder(), stream_column="cx/{region}", delivery="at-least-once"
    )
    query = (
        spark.readStream.schema(rows.schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(src)
        .writeStream.foreachBatch(streaming)
        .option("checkpointLocation", f"{workdir}/ckpt")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    exc = query.exception()
    out["query_exception"] = None if exc is None else str(exc)[:2000]
    spark.stop()
    return out


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
