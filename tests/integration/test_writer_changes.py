"""Exactly-once when users change the job between runs, in real Spark through the public API: a dead-letter
stream added after a bad row stopped the query, and a ``foreachBatch`` function that sets its own job group.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from s2_sink import S2Writer
from s2_sink.encoders import UpsertEncoder
from s2_sink.lite import LiteServer
from tests.integration._s2read import read_stream
from tests.integration.test_writer_spark import bodies, cfg_for
from tests.integration.test_writer_wiring import _run, _stream_files

pytestmark = pytest.mark.spark

GOOD = 4000


def _orders(spark: SparkSession, tmp_path: Path) -> DataFrame:
    """One micro-batch of GOOD orders with ids 0.. and one order without an id (the upsert key) last."""
    src = tmp_path / "src"
    src.mkdir()
    good = spark.range(GOOD).selectExpr("CAST(id AS BIGINT) AS id", "id * 10 AS amount")
    bad = spark.createDataFrame([(None, -1)], "id BIGINT, amount BIGINT")
    good.unionByName(bad).coalesce(1).write.parquet(str(tmp_path / "stage"))
    next((tmp_path / "stage").glob("*.parquet")).rename(src / "part-0000.parquet")
    return spark.readStream.schema("id BIGINT, amount BIGINT").parquet(str(src))


def _in_four_tasks(writer: S2Writer) -> Any:
    """The query's function: the batch spread over four tasks by a deterministic hash, the order without
    an id in the last one Spark runs (two cores: tasks 0 and 1 write first)."""

    def write(df: DataFrame, batch_id: int) -> None:
        part = F.when(F.col("id").isNull(), F.lit(3)).otherwise(F.col("id") % 3)
        writer(df.withColumn("part", part).repartition(4, "part").drop("part"), batch_id)

    return write


def _keys(lite: LiteServer, basin: str, stream: str) -> Counter[bytes]:
    return Counter(dict(r.headers)[b"@key"] for r in read_stream(lite.endpoint, basin, stream))


def test_a_dead_letter_stream_added_after_a_bad_row_writes_each_row_once(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """An upsert query fails on its one null key after part of the micro-batch was written; the user does
    what the error suggests (``on_error="dlq"`` and a dead-letter stream) and restarts from the checkpoint.
    The writer's identity is the query's, whatever its configuration: the restart goes on from the same
    ledger and recovers the batch. Every good row once, the bad row one dead letter, no error (before: the
    new configuration was a new identity, and every good row already written was written again)."""
    cfg = cfg_for(lite, basin, "orders", create_streams=True, driver_write_max_rows=0, batch_max_records=50)
    source = _orders(spark, tmp_path)
    first = S2Writer(cfg, UpsertEncoder(["id"]), write_parallelism=4)
    failure = _run(source, _in_four_tasks(first), tmp_path / "ckpt")
    assert failure is not None
    assert "set on_error='skip' or 'dlq'" in str(failure)
    written = sum(_keys(lite, basin, "orders").values())
    # The failure came after appends landed: some of the good rows, or (when the other tasks and the failing
    # task's rows before its null key all land first, as they can on a loaded machine) all of them. Either
    # way a restart that took the new configuration for a new writer would write them again.
    assert 0 < written <= GOOD

    fixed = S2Writer(
        cfg, UpsertEncoder(["id"]), on_error="dlq", dlq_stream="orders-dead", write_parallelism=4
    )
    assert _run(source, _in_four_tasks(fixed), tmp_path / "ckpt") is None
    keys = _keys(lite, basin, "orders")
    assert set(keys) == {orjson.dumps({"id": i}) for i in range(GOOD)}
    assert sum(keys.values()) == GOOD, f"{sum(keys.values()) - GOOD} duplicates"
    dead = read_stream(lite.endpoint, basin, "orders-dead")
    assert len(dead) == 1
    assert b"null" in dict(dead[0].headers)[b"s2sink-error"]


def test_a_job_group_set_by_the_function_does_not_hide_a_second_call(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """A foreachBatch function labels its jobs with ``setJobGroup`` (which hides the job group Spark set
    to the run id) and calls one S2Writer twice. The run id is read from the stream execution thread's
    name, which the function cannot change: the second call is refused with a ConfigError, never skipped
    (before: the first half written, the second 150 of 300 rows lost without an error)."""
    writer = S2Writer(cfg_for(lite, basin, "events", create_streams=True))

    def labelled_twice(df: DataFrame, batch_id: int) -> None:
        df.sparkSession.sparkContext.setJobGroup("orders-ui", "orders to S2")
        writer(df.filter("id % 2 = 0"), batch_id)
        writer(df.filter("id % 2 = 1"), batch_id)

    failure = _run(_stream_files(spark, tmp_path, [300]), labelled_twice, tmp_path / "ckpt")
    assert failure is not None
    assert "called again for micro-batch 0" in str(failure)
    assert sorted(b["id"] for b in bodies(lite, basin, "events")) == list(range(0, 300, 2))


def test_a_restart_in_the_same_process_still_skips_a_committed_batch_under_a_job_group(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """The same function, calling the writer once, fails after the writer committed micro-batch 0 (before
    Spark's commit); the query is started again in the same process with the same S2Writer. The new
    start's run id differs: the replay of batch 0 is skipped as the ledger has it, batch 1 is written.
    Each row once."""
    writer = S2Writer(cfg_for(lite, basin, "events", create_streams=True))
    failed: list[int] = []

    def labelled(df: DataFrame, batch_id: int) -> None:
        df.sparkSession.sparkContext.setJobGroup("orders-ui", "orders to S2")
        writer(df, batch_id)
        if batch_id == 0 and not failed:
            failed.append(batch_id)
            raise RuntimeError("the function fails after the writer committed")

    source = _stream_files(spark, tmp_path, [100, 100])
    assert _run(source, labelled, tmp_path / "ckpt") is not None
    assert _run(source, labelled, tmp_path / "ckpt") is None
    ids = [b["id"] for b in bodies(lite, basin, "events")]
    assert sorted(ids) == list(range(200))
