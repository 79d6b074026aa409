"""Spark SQL types as the encoders see them: their Arrow form, as Spark exchanges them with Python
(``format("s2")`` reads, decoders), and the checks of the input's columns ``validate()`` runs once on the
driver (docs/encoding.md's "supported" column).

pyspark's own converter is private and changed between minor versions; the Arrow form of each type is
fixed by Spark's JVM side (``ArrowUtils.toArrowType``), so the table below holds for every pyspark.
"""

from __future__ import annotations

import pyarrow as pa
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
    IntegralType,
    LongType,
    MapType,
    NullType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from s2_sink.errors import ConfigError

__all__ = [
    "INTEGRAL_TYPES",
    "check_headers_column",
    "check_json_type",
    "check_key_column",
    "check_order_column",
    "check_timestamp_column",
    "column_type",
    "require_column",
    "to_arrow_field",
    "to_arrow_schema",
    "to_arrow_type",
]

INTEGRAL_TYPES = (ByteType, ShortType, IntegerType, LongType)

# Every atomic type with an Arrow form (so a JSON text), checked with isinstance in this order: a subclass
# (a collated string type, say) maps as its base. TIMESTAMP crosses as UTC instants (the JVM wants the
# zone), TIMESTAMP_NTZ as zone-less wall clock. Flags: "o" = orders changes (one total order Spark and
# Arrow agree on: ``order_by``), "k" = keys a JSON map (Spark writes a key with its internal toString, so
# only keys whose text is unambiguous).
_ATOMIC: tuple[tuple[type[DataType], pa.DataType | None, str], ...] = (
    (NullType, pa.null(), ""),
    (BooleanType, pa.bool_(), "ok"),
    (ByteType, pa.int8(), "ok"),
    (ShortType, pa.int16(), "ok"),
    (IntegerType, pa.int32(), "ok"),
    (LongType, pa.int64(), "ok"),
    (FloatType, pa.float32(), "o"),
    (DoubleType, pa.float64(), "o"),
    (StringType, pa.string(), "ok"),
    (BinaryType, pa.binary(), "o"),
    (DateType, pa.date32(), "o"),
    (TimestampType, pa.timestamp("us", tz="UTC"), "o"),
    (TimestampNTZType, pa.timestamp("us"), "o"),
    (DayTimeIntervalType, pa.duration("us"), ""),
    (DecimalType, None, "o"),  # pa.decimal128 of the type's precision and scale
)


def _atomic(dtype: DataType) -> tuple[pa.DataType | None, str] | None:
    for spark_type, arrow_type, flags in _ATOMIC:
        if isinstance(dtype, spark_type):
            return arrow_type, flags
    return None


def to_arrow_type(dtype: DataType, path: str = "value") -> pa.DataType:
    """``path`` names the column in the error for a type with no mapping."""
    if isinstance(dtype, DecimalType):
        return pa.decimal128(dtype.precision, dtype.scale)
    if isinstance(dtype, ArrayType):
        return pa.list_(_field("element", to_arrow_type(dtype.elementType, f"{path}[]"), dtype.containsNull))
    if isinstance(dtype, MapType):
        key = pa.field("key", to_arrow_type(dtype.keyType, f"{path}{{key}}"), nullable=False)
        value = _field("value", to_arrow_type(dtype.valueType, f"{path}{{}}"), dtype.valueContainsNull)
        return pa.map_(key, value)
    if isinstance(dtype, StructType):
        return pa.struct([to_arrow_field(f, path) for f in dtype.fields])
    atomic = _atomic(dtype)
    if atomic is None:
        raise ConfigError(
            f"column {path!r} has type {dtype.simpleString()}, which s2_sink cannot produce as Arrow; "
            "declare it as string in the schema and convert it after reading"
        )
    return atomic[0]


def _field(name: str, atype: pa.DataType, nullable: bool) -> pa.Field:
    # Arrow has no non-nullable null type; a NOT NULL column of NullType can only hold nulls anyway.
    return pa.field(name, atype, nullable=nullable or atype == pa.null())


def to_arrow_field(field: StructField, parent: str | None = None) -> pa.Field:
    path = field.name if parent is None else f"{parent}.{field.name}"
    return _field(field.name, to_arrow_type(field.dataType, path), field.nullable)


def to_arrow_schema(schema: StructType) -> pa.Schema:
    return pa.schema([to_arrow_field(f) for f in schema.fields])


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
        if "k" not in (_atomic(dtype.keyType) or (None, ""))[1]:
            raise ConfigError(
                f"column {path!r} is a map with {dtype.keyType.simpleString()} keys; JSON encoding supports "
                "string, integral and boolean map keys (convert the keys, e.g. transform_keys(col, (k, v) -> "
                "cast(k as string)))"
            )
        check_json_type(dtype.valueType, f"{path}{{}}")
    elif _atomic(dtype) is None:
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


def check_order_column(schema: StructType, name: str) -> None:
    """ConfigError unless `name` is a column of a type with a total order (maps have none; arrays and
    structs do in Spark, but a change position is a scalar, and Arrow cannot sort them)."""
    dtype = column_type(schema, name, "order_by")
    if "o" not in (_atomic(dtype) or (None, ""))[1]:
        raise ConfigError(
            f"order_by column {name!r} has type {dtype.simpleString()}, which has no usable order; "
            "order_by takes numeric, string, binary, boolean, date or timestamp columns (a commit version, "
            "an offset, a log position): cast it, or take a scalar field of it (e.g. col.field)"
        )


def check_key_column(schema: StructType, name: str) -> None:
    """ConfigError if upsert key column `name` is a map, array or struct (no stable key identity: a map's
    entries have no fixed order, and the Flink connector keys by scalar columns)."""
    dtype = schema[name].dataType
    if isinstance(dtype, MapType | ArrayType | StructType):
        raise ConfigError(
            f"upsert key column {name!r} has type {dtype.simpleString()}; key columns must be scalar "
            "(string, numeric, boolean, binary, date, timestamp): flatten it into scalar key columns "
            "(e.g. col.field) or key by to_json(col) in a string column"
        )
