"""Checks of the input's columns, run once on the driver by ``validate()``: the Spark types the JSON
encoders accept (docs/encoding.md's "supported" column) and the metadata columns every encoder shares.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DecimalType,
    IntegerType,
    IntegralType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from s2_sink.encoders._arrow_types import ATOMIC_ARROW_TYPES
from s2_sink.errors import ConfigError

__all__ = [
    "INTEGRAL_TYPES",
    "check_headers_column",
    "check_json_type",
    "check_timestamp_column",
    "column_type",
    "require_column",
]

INTEGRAL_TYPES = (ByteType, ShortType, IntegerType, LongType)

# What reaches an encoder through Arrow has a JSON text: every atomic type with an Arrow form.
_ATOMIC = (*(spark_type for spark_type, _ in ATOMIC_ARROW_TYPES), DecimalType)

# Spark writes a map key with the key's internal toString (a date key becomes its day number), so only keys
# whose text is unambiguous are accepted.
_MAP_KEYS = (StringType, BooleanType, *INTEGRAL_TYPES)

_WHY = {
    "YearMonthIntervalType": "Spark cannot pass it through Arrow; cast it to string or to a month count",
    "CalendarIntervalType": "it has no stable text form; cast it to string",
    "TimeType": "Spark's to_json cannot write it; cast it to string",
    "VariantType": "cast it to string with to_json(col) first",
}


def check_json_type(dtype: DataType, path: str) -> None:
    if isinstance(dtype, StructType):
        for field in dtype.fields:
            check_json_type(field.dataType, f"{path}.{field.name}")
    elif isinstance(dtype, ArrayType):
        check_json_type(dtype.elementType, f"{path}[]")
    elif isinstance(dtype, MapType):
        if not isinstance(dtype.keyType, _MAP_KEYS):
            raise ConfigError(
                f"column {path!r} is a map with {dtype.keyType.simpleString()} keys; JSON encoding supports "
                "string, integral and boolean map keys (convert the keys, e.g. transform_keys(col, (k, v) -> "
                "cast(k as string)))"
            )
        check_json_type(dtype.valueType, f"{path}{{}}")
    elif not isinstance(dtype, _ATOMIC):
        why = _WHY.get(type(dtype).__name__, "it has no JSON mapping")
        raise ConfigError(
            f"column {path!r} has type {dtype.simpleString()}, which the JSON encoder does not support: {why}"
        )


def column_type(schema: StructType, name: str, role: str) -> DataType:
    require_column(schema, name, role)
    return schema[name].dataType


def require_column(schema: StructType, name: str, role: str) -> None:
    if name not in schema.fieldNames():
        raise ConfigError(
            f"{role} column {name!r} is not in the DataFrame; its columns are {schema.fieldNames()}"
        )


def check_headers_column(schema: StructType, name: str) -> None:
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
    dtype = column_type(schema, name, "timestamp")
    if not isinstance(dtype, IntegralType | TimestampType):
        raise ConfigError(
            f"timestamp column {name!r} has type {dtype.simpleString()}; expected bigint milliseconds since "
            "the epoch or timestamp (timestamp_ntz has no instant: convert it with to_utc_timestamp)"
        )
    return dtype
