"""A streaming query in its own process for the fault suite: ``python -m tests.faults._driver scn.json``.

It reads the scenario's JSON input files (a replayable, deterministic file source with a unique ``id``
column), writes them through `S2Writer` in ``foreachBatch`` (or, with ``"sink": "format"``, through
``writeStream.format("s2")``) with ``trigger(availableNow=True)`` (one file per micro-batch unless told
otherwise) and exits 0 when every file was processed. Crash points (``S2SINK_CRASH_PLAN``)
may kill it, or its executors' Python workers, at any moment; the harness then restarts it from the same
checkpoint.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def main(path: str) -> int:
    with open(path, encoding="utf-8") as fh:
        scn: dict[str, Any] = json.load(fh)
    plan = os.environ.get("S2SINK_CRASH_PLAN")
    if plan:
        with open(plan + ".driver_pid", "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))

    import logging

    from pyspark.sql import SparkSession

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("s2_sink").setLevel(logging.INFO)

    from s2_sink.config import S2Config
    from s2_sink.datasource import register
    from s2_sink.encoders import InsertEncoder, UpsertEncoder
    from s2_sink.writer import S2Writer

    spark = (
        SparkSession.builder.master(f"local[2,{scn.get('max_failures', 4)}]")
        .appName("s2sink-fault-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(scn.get("shuffle_partitions", 3)))
        .config("spark.sql.files.maxPartitionBytes", str(scn.get("max_partition_bytes", 2048)))
        .config("spark.sql.files.openCostInBytes", "0")
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    if plan:
        jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
        with open(plan + ".jvm_pid", "w", encoding="utf-8") as fh:
            fh.write(str(jvm_pid))
    cfg = S2Config(
        basin=scn["basin"],
        stream=scn["stream"],
        access_token="test-token",
        account_endpoint=scn["endpoint"],
        basin_endpoint=scn["endpoint"],
        request_timeout_ms=scn.get("request_timeout_ms", 5000),
        max_retries=scn.get("max_retries", 2),
        retry_delay_ms=20,
        batch_max_records=scn.get("batch_max_records", 50),
        create_streams=True,
        # The scenarios' batches are small: off, they test the executors' path; on, the driver's.
        driver_write_max_rows=scn.get("driver_write_max_rows", 0),
        max_inflight_requests=scn.get("max_inflight_requests", 16),
        **({"delivery_timeout_ms": scn["delivery_timeout_ms"]} if "delivery_timeout_ms" in scn else {}),
    )
    encoder = UpsertEncoder(key_columns=["k"]) if scn["encoder"] == "upsert" else InsertEncoder()
    writer = S2Writer(
        cfg,
        encoder,
        shards=scn.get("shards"),
        delivery=scn["delivery"],
        writer_id=scn.get("writer_id"),
        # The scenarios' crash points name partitions 0-3: the write stage keeps 2 x cores tasks (what
        # `auto` gives a batch of unknown size) rather than one per core for these small known-size files.
        write_parallelism=scn.get("write_parallelism", 2 * spark.sparkContext.defaultParallelism),
    )
    sink: Any = writer
    if scn["delivery"] == "at-least-once":
        from s2_sink import _crashpoints

        # At-least-once has no ledger commit; crash at the same places around the writer call.
        def sink(batch_df: Any, batch_id: int) -> None:
            writer(batch_df, batch_id)
            _crashpoints.hit("after_tasks_before_commit", batch=batch_id)
            _crashpoints.hit("after_commit_before_spark_commit", batch=batch_id)

    df = (
        spark.readStream.schema("id long, k string, v string")
        .option("maxFilesPerTrigger", scn.get("files_per_trigger", 1))
        .json(scn["input_dir"])
    )
    stream_writer = df.writeStream.foreachBatch(sink)
    if scn.get("sink") == "format":
        stream_writer = df.writeStream.format("s2").options(**_format_options(scn))
    query = stream_writer.option("checkpointLocation", scn["checkpoint"]).trigger(availableNow=True).start()
    query.awaitTermination()
    spark.stop()
    return 0


def _format_options(scn: dict[str, Any]) -> dict[str, str]:
    """The scenario's writer settings as ``format("s2")`` options."""
    options = {
        "s2.basin": scn["basin"],
        "s2.stream": scn["stream"],
        "s2.auth-token": "test-token",
        "s2.endpoints.account": scn["endpoint"],
        "s2.endpoints.basin": scn["endpoint"],
        "s2.request-timeout-ms": str(scn.get("request_timeout_ms", 5000)),
        "s2.max-retries": str(scn.get("max_retries", 2)),
        "s2.retry-delay-ms": "20",
        "sink.batch.max-size": str(scn.get("batch_max_records", 50)),
        "s2.create-streams": "true",
        "s2.delivery": scn["delivery"],
    }
    if scn["encoder"] == "upsert":
        options |= {"s2.format": "upsert", "s2.key-columns": "k"}
    if "delivery_timeout_ms" in scn:
        options["s2.delivery-timeout-ms"] = str(scn["delivery_timeout_ms"])
    if scn.get("replay_partitioning"):
        options["s2.replay-partitioning"] = scn["replay_partitioning"]
    return options


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
