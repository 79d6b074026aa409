"""Hypothesis strategies for Spark schemas of every JSON-supported type and values that fit them."""

from __future__ import annotations

import datetime as dt
import functools
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
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

__all__ = [
    "ATOMIC_TYPES",
    "atomic_types",
    "batch_of",
    "names",
    "normalized",
    "schema_and_rows",
    "spark_types",
    "texts",
    "values_of",
]

# Arrow needs valid UTF-8: no lone surrogates
texts = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)
names = st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=8)

_INTERVALS = [DayTimeIntervalType(s, e) for s in range(4) for e in range(s, 4)]
_UNITS_US = (86_400_000_000, 3_600_000_000, 60_000_000, 1)
ATOMIC_TYPES: list[DataType] = [
    NullType(),
    BooleanType(),
    ByteType(),
    ShortType(),
    IntegerType(),
    LongType(),
    FloatType(),
    DoubleType(),
    StringType(),
    BinaryType(),
    DateType(),
    TimestampType(),
    TimestampNTZType(),
    *_INTERVALS,
]

decimal_types = st.integers(1, 38).flatmap(lambda p: st.integers(0, p).map(lambda s: DecimalType(p, s)))
atomic_types = st.one_of(st.sampled_from(ATOMIC_TYPES), decimal_types)
map_key_types = st.sampled_from([StringType(), IntegerType(), LongType(), ShortType(), BooleanType()])


def _struct(children: st.SearchStrategy[DataType]) -> st.SearchStrategy[DataType]:
    return st.lists(st.tuples(names, children), min_size=1, max_size=4, unique_by=lambda t: t[0]).map(
        lambda fs: StructType([StructField(n, t) for n, t in fs])
    )


spark_types: st.SearchStrategy[DataType] = st.recursive(
    atomic_types,
    lambda children: st.one_of(
        children.map(ArrayType),
        st.tuples(map_key_types, children).map(lambda kv: MapType(*kv)),
        _struct(children),
    ),
    max_leaves=6,
)

_INT_RANGES = {ByteType: 7, ShortType: 15, IntegerType: 31, LongType: 63}
_UTC_MIN = dt.datetime(1, 1, 1, tzinfo=dt.UTC)
_UTC_MAX = dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)


def _decimal(t: DecimalType) -> st.SearchStrategy[Decimal]:
    bound = 10**t.precision - 1
    return st.integers(-bound, bound).map(lambda u: Decimal(f"{u}E-{t.scale}"))  # exact: no context rounding


def _interval(t: DayTimeIntervalType) -> st.SearchStrategy[dt.timedelta]:
    unit = _UNITS_US[t.endField]
    limit = 10**17 // unit  # within Spark's range (int64 microseconds) and Python's timedelta
    return st.integers(-limit, limit).map(lambda n: dt.timedelta(microseconds=n * unit))


# Cached per type (Spark types hash by their text): hypothesis validates every strategy it is handed the
# first time, recursively, which cost more than drawing from it when each draw built new ones.
@functools.cache
def values_of(t: DataType) -> st.SearchStrategy[Any]:
    """Non-null-or-null values of Spark type ``t`` as Python objects Arrow accepts."""
    if isinstance(t, NullType):
        return st.none()
    return st.one_of(st.none(), _present(t))


@functools.cache
def _present(t: DataType) -> st.SearchStrategy[Any]:
    for cls, bits in _INT_RANGES.items():
        if isinstance(t, cls):
            return st.integers(-(2**bits), 2**bits - 1)
    if isinstance(t, BooleanType):
        return st.booleans()
    if isinstance(t, FloatType):
        return st.floats(width=32)
    if isinstance(t, DoubleType):
        return st.floats()
    if isinstance(t, DecimalType):
        return _decimal(t)
    if isinstance(t, StringType):
        return texts
    if isinstance(t, BinaryType):
        return st.binary(max_size=16)
    if isinstance(t, DateType):
        return st.dates()
    if isinstance(t, TimestampType):
        return st.datetimes(
            min_value=_UTC_MIN.replace(tzinfo=None), max_value=_UTC_MAX.replace(tzinfo=None)
        ).map(lambda d: d.replace(tzinfo=dt.UTC))
    if isinstance(t, TimestampNTZType):
        return st.datetimes()
    if isinstance(t, DayTimeIntervalType):
        return _interval(t)
    if isinstance(t, ArrayType):
        return st.lists(values_of(t.elementType), max_size=3)
    if isinstance(t, MapType):
        return st.dictionaries(_present(t.keyType), values_of(t.valueType), max_size=3).map(
            lambda d: list(d.items())
        )
    if isinstance(t, StructType):
        return st.fixed_dictionaries({f.name: values_of(f.dataType) for f in t.fields})
    raise AssertionError(t)


@st.composite
def schema_and_rows(draw: st.DrawFn, max_rows: int = 5) -> tuple[StructType, list[dict[str, Any]]]:
    """A top-level schema (1-4 columns of any supported type) and up to ``max_rows`` rows of it."""
    schema = draw(_schemas)
    assert isinstance(schema, StructType)
    return schema, draw(_rows_of(schema, max_rows))


_schemas = _struct(spark_types)


@functools.cache
def _rows_of(schema: StructType, max_rows: int) -> st.SearchStrategy[list[dict[str, Any]]]:
    return st.lists(
        st.fixed_dictionaries({f.name: values_of(f.dataType) for f in schema.fields}), max_size=max_rows
    )


def batch_of(schema: StructType, rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """An Arrow batch of ``rows`` typed as Spark would send ``schema`` through Arrow."""
    return pa.RecordBatch.from_pylist(rows, schema=to_arrow_schema(schema))


def normalized(value: Any) -> Any:
    """NaN made comparable, so equality checks can see through it."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list):
        return [normalized(v) for v in value]
    if isinstance(value, tuple):
        return tuple(normalized(v) for v in value)
    if isinstance(value, dict):
        return {k: normalized(v) for k, v in value.items()}
    return value
