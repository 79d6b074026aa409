"""Checks of the metadata columns every encoder shares (headers, timestamp), run by ``validate()``."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegralType,
    StringType,
    StructType,
    TimestampType,
)

from s2_sink.encoders._types import column_type
from s2_sink.errors import ConfigError

__all__ = ["check_headers_column", "check_timestamp_column"]


def check_headers_column(schema: StructType, name: str) -> None:
    """The headers column must be ``array<struct<key:string|binary,value:binary|string>>`` (Kafka's)."""
    dtype = column_type(schema, name, "headers")
    element = dtype.elementType if isinstance(dtype, ArrayType) else None
    names = element.fieldNames() if isinstance(element, StructType) else []
    if not isinstance(element, StructType) or sorted(names) != ["key", "value"]:
        raise ConfigError(
            f"headers column {name!r} has type {dtype.simpleString()}; expected "
            "array<struct<key:string,value:binary>> (the shape Spark's Kafka sink uses)"
        )
    for field in element.fields:
        if not isinstance(field.dataType, StringType | BinaryType):
            raise ConfigError(
                f"headers column {name!r} field {field.name!r} has type {field.dataType.simpleString()}; "
                "expected string or binary"
            )


def check_timestamp_column(schema: StructType, name: str) -> DataType:
    """The timestamp column must be epoch milliseconds (integral) or ``timestamp``; returns its type."""
    dtype = column_type(schema, name, "timestamp")
    if not isinstance(dtype, IntegralType | TimestampType):
        raise ConfigError(
            f"timestamp column {name!r} has type {dtype.simpleString()}; expected bigint milliseconds since "
            "the epoch or timestamp (timestamp_ntz has no instant: convert it with to_utc_timestamp)"
        )
    return dtype
