"""``s2-orders-job``: one scheduled run that appends a source's new rows to an S2 stream, exactly once.

Each run is ``trigger(availableNow=True)``: it drains what arrived since the last run and stops, the only
streaming trigger serverless compute runs. The checkpoint (a Unity Catalog volume) and the writer's ledger
stream in S2 make a run that dies half-way harmless: the next run replays the interrupted micro-batch and
writes only what is missing.

The token comes from ``S2_ACCESS_TOKEN`` (a job cluster sets it from a secret scope with
``spark_env_vars: {S2_ACCESS_TOKEN: "{{secrets/s2/access-token}}"}``); where the environment cannot carry it
(serverless), ``--secret-scope``/``--secret-key`` read it on the driver with ``dbutils.secrets``.

    s2-orders-job --source-table main.sales.orders --basin my-basin --stream orders \\
        --checkpoint /Volumes/main/default/checkpoints/orders-to-s2 --writer-id orders-to-s2-v1
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from s2_sink import S2Config, S2Writer
from s2_sink.encoders import InsertEncoder


def parser() -> argparse.ArgumentParser:
    """The job's parameters (a task's ``parameters`` list)."""
    # No abbreviations: a parameter misspelt in the job's definition must fail, not match a longer flag.
    p = argparse.ArgumentParser(
        prog="s2-orders-job", description="one availableNow run to S2", allow_abbrev=False
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--source-table", help="a table to stream from (Delta), e.g. main.sales.orders")
    source.add_argument("--source-path", help="a folder of JSON files to stream from (needs --schema)")
    p.add_argument("--schema", help="DDL schema of the --source-path files, e.g. 'id long, amount double'")
    p.add_argument("--basin", required=True)
    p.add_argument("--stream", required=True)
    p.add_argument("--checkpoint", required=True, help="the query's checkpoint folder (a volume path)")
    p.add_argument(
        "--writer-id",
        required=True,
        help="the exactly-once writer's identity; change it when you reset the checkpoint",
    )
    p.add_argument(
        "--secret-scope", help="read the token from this secret scope when S2_ACCESS_TOKEN is unset"
    )
    p.add_argument("--secret-key", default="access-token")
    return p


def _token(args: argparse.Namespace) -> str | None:
    """S2_ACCESS_TOKEN, else the secret (read here, on the driver: dbutils does not exist in foreachBatch)."""
    if os.environ.get("S2_ACCESS_TOKEN"):
        return None  # S2Config reads it itself
    if args.secret_scope:
        from databricks.sdk.runtime import dbutils  # noqa: PLC0415 - it exists only on Databricks

        return str(dbutils.secrets.get(args.secret_scope, args.secret_key))
    return None


def run(spark: Any, args: argparse.Namespace) -> None:
    """One availableNow run: start the query, wait for it to drain and stop, raise if it failed."""
    token = _token(args)
    cfg = S2Config(basin=args.basin, stream=args.stream, **({"access_token": token} if token else {}))
    if args.source_table:
        source = spark.readStream.table(args.source_table)
    else:
        if not args.schema:
            raise SystemExit(
                "--source-path needs --schema (the files' DDL schema, e.g. 'id long, name string')"
            )
        source = spark.readStream.schema(args.schema).json(args.source_path)
    query = (
        source.writeStream.foreachBatch(S2Writer(cfg, InsertEncoder(), writer_id=args.writer_id))
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the run failed: {query.exception()}")


def main(argv: list[str] | None = None) -> int:
    """The entry point: parse the task's parameters, run once on the active (or a new) Spark session."""
    args = parser().parse_args(sys.argv[1:] if argv is None else argv)
    run(SparkSession.builder.getOrCreate(), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
