"""The datasets the cases write: ``events`` (the default), 5 columns whose JSON is about 150 bytes per row;
``wide``, an event table's shape with a 64-character hex digest and a constant column; ``type:T``, an ``id``
and one column of the Spark type ``T`` (every type the JSON encoders support, one at a time)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["DATASETS", "KINDS", "TYPES", "dataset", "json_body", "micro_batches", "shape"]

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


def wide(ids: DataFrame) -> DataFrame:
    """``id, user_id, source, ts, digest``: two longs, a constant string, a timestamp (microseconds) and a
    64-character hex string (about 170 bytes of JSON per row)."""
    from pyspark.sql import functions as F

    ident = F.col("id").cast("long")
    return ids.select(
        ident.alias("id"),
        (ident % 100_000).alias("user_id"),
        F.lit("web-checkout").alias("source"),
        F.timestamp_micros(F.lit(1_700_000_000_000_000) + ident * 1_013).alias("ts"),
        F.sha2(ident.cast("string"), 256).alias("digest"),
    )


def _typed(ident: Column, name: str) -> Column:
    """A column of Spark type `name` derived from `ident`: varied values, about one in ten null."""
    from pyspark.sql import functions as F

    text = ident.cast("string")
    value = {
        "boolean": ident % 3 == 0,
        "tinyint": (ident % 256 - 128).cast("tinyint"),
        "smallint": (ident % 65_536 - 32_768).cast("smallint"),
        "int": (ident * 7_919 % 2_000_000_000).cast("int"),
        "bigint": ident * 1_000_003,
        "float": (ident.cast("float") / F.lit(7.0).cast("float")).cast("float"),
        "double": ident.cast("double") / 7,
        "decimal": (ident.cast("decimal(18,0)") / 100).cast("decimal(18,2)"),
        "string": F.concat(F.lit("name-"), text, F.lit(' "quoted" é')),
        "binary": F.unhex(F.md5(text)),
        "date": F.date_add(F.lit("2020-01-01").cast("date"), (ident % 3_000).cast("int")),
        "timestamp": F.timestamp_micros(F.lit(1_700_000_000_000_000) + ident * 1_013),
        "timestamp_ntz": F.timestamp_micros(F.lit(1_700_000_000_000_000) + ident * 1_013).cast(
            "timestamp_ntz"
        ),
        "interval": F.make_dt_interval(
            ident % 10, ident % 24, ident % 60, ((ident % 60_000) / 1000).cast("decimal(18,6)")
        ),
        "array": F.array(ident % 10, ident % 100, ident % 1_000),
        "map": F.create_map(F.lit("a"), ident % 10, F.lit("b"), ident % 100),
        "struct": F.struct((ident % 10).alias("x"), F.concat(F.lit("s"), text).alias("y")),
    }[name]
    return F.when(ident % 10 != 3, value)


TYPES = (
    "boolean",
    "tinyint",
    "smallint",
    "int",
    "bigint",
    "float",
    "double",
    "decimal",
    "string",
    "binary",
    "date",
    "timestamp",
    "timestamp_ntz",
    "interval",
    "array",
    "map",
    "struct",
)
DATASETS = ("events", "wide", *(f"type:{t}" for t in TYPES))


def dataset(spark: SparkSession, rows: int, partitions: int, name: str = "events") -> DataFrame:
    """`rows` rows of the dataset `name` (one of `DATASETS`) in `partitions` partitions."""
    ids = spark.range(0, rows, numPartitions=partitions)
    if name == "events":
        return shape(ids)
    if name == "wide":
        return wide(ids)
    kind = name.removeprefix("type:")
    if name.startswith("type:") and kind in TYPES:
        from pyspark.sql import functions as F

        return ids.select(F.col("id"), _typed(F.col("id"), kind).alias(kind.replace(" ", "_")))
    raise ValueError(f"unknown dataset {name!r}; one of {', '.join(DATASETS)}")


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
