"""Our Spark -> Arrow type mapping: the Arrow form Spark's Python exchange uses, on every pyspark."""

from __future__ import annotations

import inspect
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    CalendarIntervalType,
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
    YearMonthIntervalType,
)

from s2_sink.encoders._arrow_types import to_arrow_schema, to_arrow_type
from s2_sink.errors import ConfigError
from tests.unit.encoders._strategies import spark_types


@pytest.mark.parametrize(
    ("spark", "arrow"),
    [
        (NullType(), pa.null()),
        (BooleanType(), pa.bool_()),
        (ByteType(), pa.int8()),
        (ShortType(), pa.int16()),
        (IntegerType(), pa.int32()),
        (LongType(), pa.int64()),
        (FloatType(), pa.float32()),
        (DoubleType(), pa.float64()),
        (DecimalType(38, 10), pa.decimal128(38, 10)),
        (StringType(), pa.string()),
        (BinaryType(), pa.binary()),
        (DateType(), pa.date32()),
        (TimestampType(), pa.timestamp("us", tz="UTC")),
        (TimestampNTZType(), pa.timestamp("us")),
        (DayTimeIntervalType(0, 3), pa.duration("us")),
    ],
)
def test_atomic_types(spark: DataType, arrow: pa.DataType) -> None:
    """Each atomic Spark type maps to the Arrow type the JVM reads for it."""
    assert to_arrow_type(spark) == arrow


def test_nested_types_keep_nullability() -> None:
    """Arrays, maps and structs nest, and each level keeps Spark's nullability (map keys never null)."""
    schema = StructType(
        [
            StructField("tags", ArrayType(StringType(), containsNull=False), nullable=False),
            StructField("attrs", MapType(StringType(), LongType(), valueContainsNull=True)),
            StructField("inner", StructType([StructField("at", TimestampType(), nullable=False)])),
        ]
    )
    expected = pa.schema(
        [
            pa.field("tags", pa.list_(pa.field("element", pa.string(), nullable=False)), nullable=False),
            pa.field(
                "attrs",
                pa.map_(pa.field("key", pa.string(), nullable=False), pa.field("value", pa.int64())),
            ),
            pa.field("inner", pa.struct([pa.field("at", pa.timestamp("us", tz="UTC"), nullable=False)])),
        ]
    )
    got = to_arrow_schema(schema)
    assert got.equals(expected)
    assert not got.field("tags").type.value_field.nullable
    assert not got.field("inner").type.field("at").nullable


@pytest.mark.parametrize("bad", [YearMonthIntervalType(), CalendarIntervalType()])
def test_unmapped_type_names_the_column_path(bad: DataType) -> None:
    """A type with no Arrow form here is refused with the nested column path and the type."""
    schema = StructType([StructField("outer", StructType([StructField("span", ArrayType(bad))]))])
    with pytest.raises(ConfigError, match=r"column 'outer\.span\[\]' has type") as info:
        to_arrow_schema(schema)
    assert bad.simpleString() in str(info.value)


def test_null_type_is_always_nullable() -> None:
    """Arrow has no NOT NULL null type: a NOT NULL NullType column (or element) maps to a nullable one."""
    schema = StructType(
        [StructField("n", NullType(), nullable=False), StructField("a", ArrayType(NullType(), False))]
    )
    got = to_arrow_schema(schema)
    assert got.field("n").nullable
    assert got.field("n").type == pa.null()
    assert got.field("a").type.value_field.nullable


def _pyspark_converter() -> Any:
    """pyspark's private converter where this pyspark has one, called as its signature wants."""
    try:
        from pyspark.sql.pandas.types import to_arrow_schema as theirs
    except ImportError:  # pragma: no cover - depends on the installed pyspark
        return None
    if "timezone" in inspect.signature(theirs).parameters:  # pyspark 4.3+: the zone is an argument
        return lambda schema: theirs(schema, timezone="UTC")
    return theirs


@settings(max_examples=200, deadline=None)
@given(spark_types)
def test_agrees_with_pyspark_on_every_supported_type(dtype: DataType) -> None:
    """On arbitrary nestings of every supported type, the mapping equals what pyspark itself produces."""
    theirs = _pyspark_converter()
    if theirs is None:  # pragma: no cover - depends on the installed pyspark
        pytest.skip("this pyspark has no Arrow schema converter to compare with")
    fields = [StructField("c", dtype)]
    if not isinstance(dtype, NullType):  # pyarrow refuses a NOT NULL null type (see the test above)
        fields.append(StructField("d", ArrayType(dtype, containsNull=False), nullable=False))
    schema = StructType(fields)
    expected: pa.Schema = theirs(schema)
    assert to_arrow_schema(schema).equals(expected.remove_metadata())
