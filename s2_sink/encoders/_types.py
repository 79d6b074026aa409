"""Which Spark SQL types the JSON encoders accept, checked once on the driver.

The full type → JSON table lives in docs/encoding.md; this module enforces its "supported" column.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from s2_sink.errors import ConfigError

__all__ = ["INTEGRAL_TYPES", "check_json_type", "column_type", "require_column"]

INTEGRAL_TYPES = (ByteType, ShortType, IntegerType, LongType)

_ATOMIC = (
    NullType,
    BooleanType,
    *INTEGRAL_TYPES,
    FloatType,
    DoubleType,
    DecimalType,
    StringType,  # CharType and VarcharType read back as StringType in DataFrames
    BinaryType,
    DateType,
    TimestampType,
    TimestampNTZType,
    DayTimeIntervalType,
)

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
    """Raise ConfigError unless ``dtype`` (at column ``path``) has a JSON mapping on both encoding paths."""
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
    """The type of top-level column ``name``; ConfigError naming ``role`` when it is missing."""
    require_column(schema, name, role)
    return schema[name].dataType


def require_column(schema: StructType, name: str, role: str) -> None:
    """Raise ConfigError if ``schema`` has no top-level column ``name`` (needed as ``role``)."""
    if name not in schema.fieldNames():
        raise ConfigError(
            f"{role} column {name!r} is not in the DataFrame; its columns are {schema.fieldNames()}"
        )
