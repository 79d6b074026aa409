"""S2Writer builds a schema's record-frame projection once and reuses it for every later micro-batch of that
schema (building Spark columns from Python costs a JVM round trip each): on classic local[2] Spark, the
reused projection gives the frame the encoder builds from scratch, a compacting projection is rebuilt per
batch, and a pickled writer starts without the session's columns."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession

from s2_sink import S2Writer
from s2_sink.encoders import InsertEncoder, UpsertEncoder
from s2_sink.lite import LiteServer
from tests.integration.test_writer_spark import bodies, cfg_for, rows_df

pytestmark = pytest.mark.spark

CDC_SCHEMA = "k string, v int, op string, pos bigint"


class _CountingInsert(InsertEncoder):
    """An InsertEncoder that counts how often a projection is built."""

    built = 0

    def recipe(self, df: DataFrame, **kw: Any) -> Any:
        type(self).built += 1
        return super().recipe(df, **kw)

    def project(self, df: DataFrame, **kw: Any) -> DataFrame:
        type(self).built += 1
        return super().project(df, **kw)


def _rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted(tuple(r) for r in df.collect())


def test_second_batch_reuses_the_projection_and_gets_the_same_frame(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """Two batches of one schema: the projection is built for the first only, and the second batch's frame
    holds exactly the rows the encoder projects for it from scratch; both batches are written once each."""
    encoder = _CountingInsert()
    writer = S2Writer(cfg_for(lite, basin, create_streams=True), encoder, writer_id="memo")
    writer(rows_df(spark, 50), 0)
    assert _CountingInsert.built == 1
    second = rows_df(spark, 120).filter("id >= 50")
    frame = writer.frame(second)
    assert _CountingInsert.built == 1, "the second batch built its projection again"
    expected = InsertEncoder().project(second).select("_s2_body", "_s2_timestamp", "_s2_key", "_s2_error")
    assert frame.columns == expected.columns
    assert _rows(frame) == _rows(expected)
    writer(second, 1)
    assert _CountingInsert.built == 1
    assert sorted(b["id"] for b in bodies(lite, basin, "events")) == list(range(120))
    other = rows_df(spark, 5).drop("name")  # another schema: built (and validated) for it
    writer.frame(other)
    assert _CountingInsert.built == 2


def test_upsert_with_op_column_reuses_its_filter(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """An upsert projection that drops update pre-images (a filter and a select) is reused: the second
    batch's frame drops its pre-images and equals the from-scratch projection."""
    encoder = UpsertEncoder(["k"], op_column="op")
    writer = S2Writer(cfg_for(lite, basin, stream="cdc"), encoder, writer_id="memo-cdc")
    first = spark.createDataFrame([("a", 1, "u", 1), ("b", 2, "update_preimage", 2)], CDC_SCHEMA)
    second = spark.createDataFrame(
        [("c", 3, "update_preimage", 3), ("c", 4, "update_postimage", 4), ("d", 5, "d", 5)], CDC_SCHEMA
    )
    assert encoder.recipe(first, flat_changelog=True) is not None
    writer.frame(first)
    frame = writer.frame(second)
    expected = encoder.project(second, flat_changelog=True).select(*frame.columns)
    assert _rows(frame) == _rows(expected)
    assert len(_rows(frame)) == 2


def test_compacting_projection_is_built_for_each_batch(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """compact=True ranks and reorders rows (more than a filter and a select): no recipe, and each batch's
    frame is compacted from its own rows."""
    encoder = UpsertEncoder(["k"], op_column="op", order_by="pos", exclude_columns=["pos"], compact=True)
    writer = S2Writer(cfg_for(lite, basin, stream="compact"), encoder, writer_id="memo-compact")
    first = spark.createDataFrame([("a", 1, "u", 1), ("a", 2, "u", 2)], CDC_SCHEMA)
    second = spark.createDataFrame([("b", 3, "u", 3), ("b", 4, "u", 4), ("c", 5, "u", 5)], CDC_SCHEMA)
    assert encoder.recipe(first, flat_changelog=True) is None
    assert len(_rows(writer.frame(first))) == 1
    bodies_second = sorted(r["_s2_body"] for r in writer.frame(second).collect())
    assert bodies_second == [b'{"v":4}', b'{"v":5}']


def test_a_pickled_writer_builds_its_own_projection(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """A writer pickled after a batch (as Spark Connect ships it) carries no Spark columns of the session
    that built them, and writes its next batch with a projection of its own."""
    writer = S2Writer(cfg_for(lite, basin, stream="pickled", create_streams=True), writer_id="memo-pickle")
    writer(rows_df(spark, 10), 0)
    copy = cloudpickle.loads(cloudpickle.dumps(writer))
    assert copy._frames == {}
    assert writer._frames
    copy(rows_df(spark, 20).filter("id >= 10"), 1)
    assert sorted(b["id"] for b in bodies(lite, basin, "pickled")) == list(range(20))
