"""The output schemas of the s2 source, and which user schemas each format can produce.

Apart from the conversions, which import Arrow's compute kernels and the SDK: creating the source and
planning a read, each in a fresh Python process, need only these.
"""

from __future__ import annotations

from typing import Literal

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from s2_sink._frame_names import TIMESTAMP_COLUMN
from s2_sink._read.read_options import ReadFormat
from s2_sink.errors import ConfigError

__all__ = [
    "ACTION_COLUMN",
    "KAFKA_SCHEMA",
    "META_COLUMNS",
    "RAW_SCHEMA",
    "UPSERT_SCHEMA",
    "RowsKind",
    "check_schema",
    "default_schema",
    "is_typed_upsert",
    "rows_kind",
]


def _headers(key: DataType) -> StructField:
    pair = StructType([StructField("key", key, False), StructField("value", BinaryType(), False)])
    return StructField("headers", ArrayType(pair, False), False)


#: Where a record stands in its stream: the first columns of every schema the source shows.
_POSITION = (
    StructField("stream", StringType(), False),
    StructField("seq_num", LongType(), False),
    StructField("timestamp", TimestampType(), False),
)

RAW_SCHEMA = StructType(
    [
        *_POSITION,
        _headers(BinaryType()),
        StructField("body", BinaryType(), False),
    ]
)

KAFKA_SCHEMA = StructType(
    [
        *_POSITION,
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), False),
        _headers(StringType()),
    ]
)

UPSERT_SCHEMA = StructType(
    [
        *_POSITION,
        StructField("key", StringType(), False),
        StructField("action", StringType(), False),
        StructField("value", StringType(), True),
    ]
)

META_COLUMNS: dict[str, DataType] = {
    "_s2_stream": StringType(),
    "_s2_seq_num": LongType(),
    TIMESTAMP_COLUMN: TimestampType(),  # the record frame's timestamp column too
}
ACTION_COLUMN = "_s2_action"
"""The column that receives an upsert record's action (``u`` / ``d``)."""


def default_schema(fmt: ReadFormat) -> StructType:
    """The schema Spark shows when the user gives none (json needs one)."""
    schema = {"raw": RAW_SCHEMA, "upsert": UPSERT_SCHEMA, "kafka": KAFKA_SCHEMA}.get(fmt)
    if schema is not None:
        return schema
    raise ConfigError(
        "s2.format=json needs a schema: spark.read.format('s2').schema('id long, name string')..., "
        "or read s2.format=raw and parse the body yourself"
    )


def is_typed_upsert(schema: StructType) -> bool:
    # A subset of the standard columns is a projection; anything else is a table schema to decode into.
    return not _subset_of(schema, UPSERT_SCHEMA)


RowsKind = Literal["raw", "json", "kafka", "upsert", "typed-upsert"]
"""How a read's records become its rows: its format, with upsert's two ways apart."""


def rows_kind(fmt: ReadFormat, schema: StructType) -> RowsKind:
    """Decided on the driver, once per read, and handed to its tasks (they dispatch on it per batch)."""
    return "typed-upsert" if fmt == "upsert" and is_typed_upsert(schema) else fmt


def _subset_of(schema: StructType, full: StructType) -> bool:
    known = {f.name: f.dataType for f in full.fields}
    return all(f.name in known and known[f.name] == f.dataType for f in schema.fields)


def check_schema(fmt: ReadFormat, schema: StructType) -> None:
    if not schema.fields:
        raise ConfigError("the schema given to format('s2') has no columns")
    if fmt in ("raw", "kafka"):
        known = {f.name: f.dataType for f in (RAW_SCHEMA if fmt == "raw" else KAFKA_SCHEMA).fields}
        for f in schema.fields:
            if f.name not in known:
                raise ConfigError(
                    f"column {f.name!r} is not produced by s2.format={fmt}; columns are {list(known)}"
                )
            if known[f.name] != f.dataType:
                raise ConfigError(
                    f"column {f.name!r} of s2.format={fmt} has type {known[f.name].simpleString()}, "
                    f"not {f.dataType.simpleString()}"
                )
        return
    for f in schema.fields:
        expected = META_COLUMNS.get(f.name) or (StringType() if f.name == ACTION_COLUMN else None)
        if expected is not None and f.dataType != expected:
            raise ConfigError(f"column {f.name!r} must have type {expected.simpleString()}")
        if f.name == ACTION_COLUMN and fmt != "upsert":
            raise ConfigError(f"column {ACTION_COLUMN!r} exists only with s2.format=upsert")
