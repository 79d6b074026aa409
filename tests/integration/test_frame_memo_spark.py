"""S2Writer builds a schema's column selection and encoding once and reuses them for every later micro-batch
of that schema (building Spark columns from Python costs a JVM round trip each, and validating the schema a
pass over it): on classic local[2] Spark, the reused selection gives the tasks the rows the encoder reads,
a compaction is applied to each batch's own rows, and a pickled writer starts without the session's
columns."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark import cloudpickle
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from s2_sink import S2Writer
from s2_sink._write.driver.batch_layout import laid_out
from s2_sink.encoders import InsertEncoder, UpsertEncoder
from s2_sink.lite import LiteServer
from tests.integration.test_writer_spark import bodies, cfg_for, rows_df

pytestmark = pytest.mark.spark

CDC_SCHEMA = "k string, v int, op string, pos bigint"


class _CountingInsert(InsertEncoder):
    """An InsertEncoder that counts how often a schema is validated for a selection."""

    built = 0

    def validate(self, schema: StructType, **kw: Any) -> None:
        type(self).built += 1
        super().validate(schema, **kw)


def _bodies(writer: S2Writer, df: DataFrame) -> list[bytes]:
    """The record bodies the writer's tasks encode for `df`."""
    rows, encoding = writer.rows(df)
    return sorted(
        bytes(r["_s2_body"]) for r in laid_out(rows, encoding, tasks=2, by_key=False).frames().collect()
    )


def test_second_batch_reuses_the_selection_and_gets_the_same_records(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """Two batches of one schema: the selection is built (and the schema validated) for the first only, the
    second batch's rows hold exactly the columns the encoder reads, and both batches are written once
    each."""
    encoder = _CountingInsert(exclude_columns=["name"])
    writer = S2Writer(cfg_for(lite, basin, create_streams=True), encoder, writer_id="memo")
    writer(rows_df(spark, 50), 0)
    assert _CountingInsert.built == 1
    second = rows_df(spark, 120).filter("id >= 50")
    rows, _ = writer.rows(second)
    assert _CountingInsert.built == 1, "the second batch built its selection again"
    assert rows.columns == [c for c in second.columns if c != "name"]
    assert _bodies(writer, second)[0] == b'{"id":100,"region":"us","amount":1000}'
    writer(second, 1)
    assert _CountingInsert.built == 1
    assert sorted(b["id"] for b in bodies(lite, basin, "events")) == list(range(120))
    assert all("name" not in b for b in bodies(lite, basin, "events"))
    other = rows_df(spark, 5).drop("amount")  # another schema: built (and validated) for it
    writer.rows(other)
    assert _CountingInsert.built == 2


def test_upsert_with_op_column_drops_each_batchs_pre_images(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """An upsert encoding that drops update pre-images, reused for a second batch, drops that batch's own."""
    encoder = UpsertEncoder(["k"], op_column="op")
    writer = S2Writer(cfg_for(lite, basin, stream="cdc"), encoder, writer_id="memo-cdc")
    first = spark.createDataFrame([("a", 1, "u", 1), ("b", 2, "update_preimage", 2)], CDC_SCHEMA)
    second = spark.createDataFrame(
        [("c", 3, "update_preimage", 3), ("c", 4, "update_postimage", 4), ("d", 5, "d", 5)], CDC_SCHEMA
    )
    assert _bodies(writer, first) == [b'{"v":1,"pos":1}']
    assert _bodies(writer, second) == [b"", b'{"v":4,"pos":4}']


def test_compaction_applies_to_each_batchs_own_rows(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """compact=True ranks each batch's rows in Spark after they are encoded: each batch keeps its own last
    change per key, whatever the batch before held."""
    encoder = UpsertEncoder(["k"], op_column="op", order_by="pos", exclude_columns=["pos"], compact=True)
    writer = S2Writer(cfg_for(lite, basin, stream="compact"), encoder, writer_id="memo-compact")
    first = spark.createDataFrame([("a", 1, "u", 1), ("a", 2, "u", 2)], CDC_SCHEMA)
    second = spark.createDataFrame([("b", 3, "u", 3), ("b", 4, "u", 4), ("c", 5, "u", 5)], CDC_SCHEMA)

    def compacted(df: DataFrame) -> list[bytes]:
        rows, encoding = writer.rows(df)
        frame = laid_out(rows, encoding, tasks=2, by_key=True).frames()
        return sorted(bytes(r["_s2_body"]) for r in frame.collect())

    assert compacted(first) == [b'{"v":2}']
    assert compacted(second) == [b'{"v":4}', b'{"v":5}']


def test_a_pickled_writer_builds_its_own_selection(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """A writer pickled after a batch (as Spark Connect ships it) carries no Spark columns of the session
    that built them, and writes its next batch with a selection of its own."""
    writer = S2Writer(cfg_for(lite, basin, stream="pickled", create_streams=True), writer_id="memo-pickle")
    writer(rows_df(spark, 10), 0)
    copy = cloudpickle.loads(cloudpickle.dumps(writer))
    assert copy._memos == {}
    assert writer._memos
    copy(rows_df(spark, 20).filter("id >= 10"), 1)
    assert sorted(b["id"] for b in bodies(lite, basin, "pickled")) == list(range(20))
