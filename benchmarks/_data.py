"""The one dataset every case writes: 5 columns whose JSON rendering is about 150 bytes per row."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["KINDS", "dataset", "json_body", "micro_batches", "shape"]

KINDS = ("view", "click", "purchase", "refund", "search")


def shape(ids: DataFrame, id_col: str = "id") -> DataFrame:
    """``id, ts, user, kind, payload`` derived from a long column, so every build of id n is the same row.

    A row renders as e.g. ``{"id":1234,"ts":"2023-11-14T22:13:21.234Z","user":"user-001234","kind":"refund",
    "payload":"<55 hex chars>"}`` (about 150 bytes; the session time zone is UTC).
    """
    from pyspark.sql import functions as F

    kinds = F.array(*[F.lit(k) for k in KINDS])
    ident = F.col(id_col).cast("long")
    text = ident.cast("string")
    return ids.select(
        ident.alias("id"),
        F.timestamp_millis(F.lit(1_700_000_000_000) + ident).alias("ts"),
        F.format_string("user-%06d", ident % 100_000).alias("user"),
        F.element_at(kinds, (ident % len(KINDS) + 1).cast("int")).alias("kind"),
        F.concat(F.md5(text), F.substring(F.sha1(text), 1, 23)).alias("payload"),
    )


def dataset(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    """`rows` rows of `shape` in `partitions` partitions."""
    return shape(spark.range(0, rows, numPartitions=partitions))


def micro_batches(spark: SparkSession, rows_per_batch: int, partitions: int) -> DataFrame:
    """A streaming `shape` DataFrame of exactly `rows_per_batch` rows per micro-batch (rate-micro-batch)."""
    src = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", partitions)
        .load()
    )
    return shape(src, "value")


def json_body(df: DataFrame) -> DataFrame:
    """The plain encoding projection the naive patterns use: one ``value`` string column of JSON."""
    from pyspark.sql import functions as F

    return df.select(F.to_json(F.struct(*df.columns)).alias("value"))
