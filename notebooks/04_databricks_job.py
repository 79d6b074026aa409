# Databricks notebook source
# MAGIC %md
# MAGIC # s2_sink as a Databricks job
# MAGIC
# MAGIC A streaming job that appends a table's new rows to an S2 stream, exactly once, on a schedule.
# MAGIC
# MAGIC This file is three things at once:
# MAGIC - a **Databricks notebook** (the `# Databricks notebook source` first line makes the workspace import
# MAGIC   it as one);
# MAGIC - a **Python script task** (`spark_python_task`), taking `--key value` parameters;
# MAGIC - a **local program**: `python notebooks/04_databricks_job.py` runs it against the embedded lite
# MAGIC   server.
# MAGIC
# MAGIC On Databricks the S2 token comes from a secret scope (`dbutils.secrets`); elsewhere from
# MAGIC `S2_ACCESS_TOKEN`. With neither, the job starts an embedded lite server and writes there (useful for a
# MAGIC dry run).
# MAGIC
# MAGIC ## Cluster and library setup
# MAGIC 1. Build the wheel: `make dist` -> `dist/s2_sink-<version>-py3-none-any.whl`.
# MAGIC 2. Upload it to a Unity Catalog volume (or workspace files), e.g. `databricks fs cp
# MAGIC    dist/s2_sink-0.1.0-py3-none-any.whl dbfs:/Volumes/main/default/libs/`.
# MAGIC 3. Attach, in this order, the pinned dependencies of `examples/databricks/requirements.txt` (PyPI
# MAGIC    libraries: `s2-sdk`, `protobuf` 6, `httpx`, `orjson`, `xxhash`) and then the wheel (`whl`), as
# MAGIC    the job definition below does; or in a notebook, one `%pip install` of the pins and then
# MAGIC    `/Volumes/.../s2_sink-...whl` (docs/databricks.md). s2-sink does not depend on pyspark: the runtime's
# MAGIC    own `pyspark`, `pyarrow`, `numpy` and `pandas` stay as they are.
# MAGIC 4. Store the token: `databricks secrets create-scope s2` and `databricks secrets put-secret s2
# MAGIC    access-token`.
# MAGIC 5. Runtime: Databricks Runtime **15.4 LTS or later** recommended. `S2Writer` with `foreachBatch` needs
# MAGIC    Spark >= 3.5 and Python >= 3.11 (DBR 15.x ships both); the `format("s2")` Python data source needs
# MAGIC    DBR 15.2+ for batch reads and writes and 15.3+ for streaming.
# MAGIC 6. Access modes: on *dedicated* (single user) compute everything runs as in open-source Spark. On
# MAGIC    *standard* (shared) compute and serverless, the job talks to Spark through Spark Connect: the
# MAGIC    `foreachBatch` function runs in a separate Python process and must pickle (`S2Writer` does: it
# MAGIC    holds plain values), `dbutils` is not available inside it (read the secret on the driver, as
# MAGIC    below), `writer.history` stays in that process (use `on_metrics` or the log line), and exactly-once
# MAGIC    needs an explicit `--writer-id`, because the query id cannot be read there.
# MAGIC 7. Executors need egress to `https://a.s2.dev` and `https://<basin>.b.s2.dev` (port 443).
# MAGIC
# MAGIC A job definition (Jobs API 2.1 / `databricks bundle`):
# MAGIC ```yaml
# MAGIC tasks:
# MAGIC   - task_key: to_s2
# MAGIC     spark_python_task:
# MAGIC       python_file: /Workspace/Users/me/s2_sink/04_databricks_job.py
# MAGIC       parameters: ["--source-table", "main.sales.orders", "--basin", "my-basin", "--stream", "orders",
# MAGIC                    "--checkpoint", "/Volumes/main/default/checkpoints/orders-to-s2",
# MAGIC                    "--writer-id", "orders-to-s2-v1"]
# MAGIC     libraries:
# MAGIC       - pypi: {package: s2-sdk==0.13.0}
# MAGIC       - pypi: {package: protobuf==6.33.6}
# MAGIC       - pypi: {package: h2==4.4.1}
# MAGIC       - pypi: {package: hpack==4.2.0}
# MAGIC       - pypi: {package: httpx==0.28.1}
# MAGIC       - pypi: {package: orjson==3.13.0}
# MAGIC       - pypi: {package: xxhash==4.1.0}
# MAGIC       - whl: /Volumes/main/default/libs/s2_sink-0.1.0-py3-none-any.whl
# MAGIC     new_cluster: {spark_version: "15.4.x-scala2.12", num_workers: 2, node_type_id: "i3.xlarge"}
# MAGIC ```

# COMMAND ----------

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from pyspark.sql import SparkSession

from s2_sink import S2Config, S2Writer
from s2_sink.encoders import InsertEncoder


def on_databricks() -> bool:
    """Databricks sets this variable on its drivers and executors."""
    return "DATABRICKS_RUNTIME_VERSION" in os.environ


def is_spark_connect(spark: SparkSession) -> bool:
    """Standard (shared) access mode and serverless run the job through Spark Connect."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Append a table's new rows to an S2 stream, exactly once.")
    p.add_argument("--source-table", default=None, help="table to stream from; default: a generated source")
    p.add_argument("--basin", default=os.environ.get("S2_BASIN"))
    p.add_argument("--stream", default="jobs/orders")
    p.add_argument("--checkpoint", default=None, help="checkpoint location (a volume path on Databricks)")
    p.add_argument(
        "--writer-id",
        default=None,
        help="exactly-once identity; required under Spark Connect. Change it when you reset the checkpoint.",
    )
    p.add_argument("--secret-scope", default="s2")
    p.add_argument("--secret-key", default="access-token")
    p.add_argument("--rows", type=int, default=2000, help="generated source only: rows of the micro-batch")
    # parse_known_args: when this file runs as a notebook, the kernel's own argv must not break it.
    return p.parse_known_args(argv)[0]


def access_token(args: argparse.Namespace) -> str | None:
    """A Databricks secret on Databricks, else S2_ACCESS_TOKEN; None means: use the embedded lite server."""
    if on_databricks():
        dbutils = globals().get("dbutils")  # a notebook global
        if dbutils is None:
            from databricks.sdk.runtime import dbutils  # noqa: PLC0415 - a Python script task
        return str(dbutils.secrets.get(scope=args.secret_scope, key=args.secret_key))
    return os.environ.get("S2_ACCESS_TOKEN") or None


args = parse_args(sys.argv[1:])
if not on_databricks():
    # Local runs: Spark's Python workers use this interpreter (the one with s2_sink installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
spark = SparkSession.builder.appName("s2-sink-job").getOrCreate()

# COMMAND ----------

# MAGIC %md
# MAGIC ## Where to write
# MAGIC S2 when a token is available (the cloud, or the endpoints in `S2_ACCOUNT_ENDPOINT` /
# MAGIC `S2_BASIN_ENDPOINT`), otherwise an embedded lite server on this machine. Read the secret here, on the
# MAGIC driver: `dbutils` is not available inside `foreachBatch` under Spark Connect. The token never appears
# MAGIC in `repr`, logs or errors.

# COMMAND ----------

lite = None
token = access_token(args)
if token is not None:
    if not args.basin:
        raise SystemExit("--basin (or S2_BASIN) is required when writing to S2; create the basin first")
    cfg = S2Config.from_env(basin=args.basin, stream=args.stream, access_token=token, create_streams=True)
else:
    from s2_sink.lite import LiteServer
    from s2_sink.testing import fresh_basin

    lite = LiteServer().start()
    basin = fresh_basin(lite.endpoint, args.basin)
    cfg = S2Config(
        basin=basin,
        stream=args.stream,
        account_endpoint=lite.endpoint,
        basin_endpoint=lite.endpoint,
        create_streams=True,
    )
print(f"writing to basin {cfg.basin!r}, stream {cfg.stream!r} at {cfg.basin_endpoint}")

# COMMAND ----------

# MAGIC %md
# MAGIC ## The streaming query
# MAGIC `trigger(availableNow=True)`: each run of the scheduled job drains what is new since the last run,
# MAGIC then stops; the checkpoint remembers where it was, and the ledger in S2 makes every row land exactly
# MAGIC once even when a run dies half-way and the next run replays its last micro-batch. On Databricks the
# MAGIC source is a table (its appends, or its change feed with `readChangeFeed` and `UpsertEncoder`); locally
# MAGIC a generated source.

# COMMAND ----------

if is_spark_connect(spark) and not args.writer_id:
    raise SystemExit("--writer-id is required under Spark Connect (standard access mode, serverless)")
checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="s2-job-ckpt-")
writer = S2Writer(
    cfg,
    encoder=InsertEncoder(),
    writer_id=args.writer_id,
    on_metrics=lambda m: print(m.log_line(), flush=True),  # runs where foreachBatch runs
)

if args.source_table:
    source = spark.readStream.table(args.source_table)
else:
    source = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", args.rows)
        .load()
        .selectExpr("value AS order_id", "timestamp AS ts", "value % 7 AS store")
    )
query = (
    source.writeStream.foreachBatch(writer)
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()

# COMMAND ----------

if not is_spark_connect(spark):  # under Spark Connect the writer's history lives in the server process
    total = sum(m.records for m in writer.history)
    print(f"micro-batches: {len(writer.history)}, records appended: {total}")
if lite is not None:
    lite.stop()
