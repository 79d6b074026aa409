"""Spark SQL types -> Arrow types, as Spark exchanges them with Python (``format("s2")`` reads, decoders).

pyspark's own converter is private and changed between minor versions; the Arrow form of each type is
fixed by Spark's JVM side (``ArrowUtils.toArrowType``), so the few lines below hold for every pyspark.
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

__all__ = ["ATOMIC_ARROW_TYPES", "to_arrow_field", "to_arrow_schema", "to_arrow_type"]

# Checked with isinstance, in this order: a subclass (a collated string type, say) maps as its base.
ATOMIC_ARROW_TYPES: tuple[tuple[type[DataType], pa.DataType], ...] = (
    (NullType, pa.null()),
    (BooleanType, pa.bool_()),
    (ByteType, pa.int8()),
    (ShortType, pa.int16()),
    (IntegerType, pa.int32()),
    (LongType, pa.int64()),
    (FloatType, pa.float32()),
    (DoubleType, pa.float64()),
    (StringType, pa.string()),
    (BinaryType, pa.binary()),
    (DateType, pa.date32()),
    # TIMESTAMP crosses as UTC instants (the JVM wants the zone), TIMESTAMP_NTZ as zone-less wall clock.
    (TimestampType, pa.timestamp("us", tz="UTC")),
    (TimestampNTZType, pa.timestamp("us")),
    (DayTimeIntervalType, pa.duration("us")),
)


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
    for spark_type, arrow_type in ATOMIC_ARROW_TYPES:
        if isinstance(dtype, spark_type):
            return arrow_type
    raise ConfigError(
        f"column {path!r} has type {dtype.simpleString()}, which s2_sink cannot produce as Arrow; "
        "declare it as string in the schema and convert it after reading"
    )


def _field(name: str, atype: pa.DataType, nullable: bool) -> pa.Field:
    # Arrow has no non-nullable null type; a NOT NULL column of NullType can only hold nulls anyway.
    return pa.field(name, atype, nullable=nullable or atype == pa.null())


def to_arrow_field(field: StructField, parent: str | None = None) -> pa.Field:
    path = field.name if parent is None else f"{parent}.{field.name}"
    return _field(field.name, to_arrow_type(field.dataType, path), field.nullable)


def to_arrow_schema(schema: StructType) -> pa.Schema:
    return pa.schema([to_arrow_field(f) for f in schema.fields])
