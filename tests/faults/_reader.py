"""A streaming ``readStream.format("s2")`` query in its own process for the fault suite:
``python -m tests.faults._reader scn.json``.

It reads the scenario's stream a few hundred records per micro-batch and appends every record's ``id`` (one
per line) to ``out`` from ``foreachBatch``; it exits 0 once ``expect`` records were read, 1 if the query
failed first.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any


def main(path: str) -> int:
    with open(path, encoding="utf-8") as fh:
        scn: dict[str, Any] = json.load(fh)

    import logging

    from pyspark.sql import SparkSession

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("s2_sink").setLevel(logging.INFO)

    from s2_sink.datasource import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("s2sink-fault-reader")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    read: list[int] = [0]
    out = scn["out"]

    def record(batch_df: Any, batch_id: int) -> None:
        ids = [json.loads(row.body)["id"] for row in batch_df.select("body").collect()]
        with open(out, "a", encoding="utf-8") as fh:
            fh.write("".join(f"{i}\n" for i in ids))
        read[0] += len(ids)

    df = (
        spark.readStream.format("s2")
        .option("s2.basin", scn["basin"])
        .option("s2.stream", scn["stream"])
        .option("s2.auth-token", "test-token")
        .option("s2.endpoints.account", scn["endpoint"])
        .option("s2.endpoints.basin", scn["endpoint"])
        .option("s2.request-timeout-ms", "5000")
        .option("s2.retry-delay-ms", "20")
        .option("s2.max-records-per-trigger", str(scn.get("per_trigger", 300)))
        .load()
    )
    query = (
        df.writeStream.foreachBatch(record)
        .option("checkpointLocation", scn["checkpoint"])
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    while read[0] < scn["expect"]:
        if query.exception() is not None or not query.isActive:
            print(f"reader query failed after {read[0]} records: {query.exception()}", flush=True)
            spark.stop()
            return 1
        time.sleep(0.2)
    query.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
