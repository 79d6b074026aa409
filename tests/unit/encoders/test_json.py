"""JSON insert encoding on the Arrow path: round trips through the decoder, exact text for each type."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import orjson
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from s2_sink.encoders import BODY, InsertEncoder, decode_json
from tests.hypothesis_profiles import examples
from tests.unit.encoders._strategies import batch_of, normalized, schema_and_rows


def bodies(schema: StructType, rows: list[dict[str, Any]]) -> list[bytes]:
    """The JSON bodies InsertEncoder writes for ``rows``."""
    frame = InsertEncoder().encode_arrow(batch_of(schema, rows), schema=schema)
    return frame.column(BODY).to_pylist()


# One property for both checks: drawing the cases costs more than checking them.
@settings(max_examples=examples(300, fast=150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_rows())
def test_every_supported_type_round_trips_in_complete_json_objects(
    case: tuple[StructType, list[dict[str, Any]]],
) -> None:
    """Arbitrary values of every supported type (nested too) come back equal through decode_json, and every
    body is a JSON object listing every data column in schema order, nulls included (the decoder alone
    would read a missing field as null)."""
    schema, rows = case
    batch = batch_of(schema, rows)
    frame = InsertEncoder().encode_arrow(batch, schema=schema)
    written = frame.column(BODY).to_pylist()
    for body in written:
        assert list(orjson.loads(body)) == schema.fieldNames()
    decoded = decode_json(written, schema)
    assert normalized(decoded.to_pylist()) == normalized(batch.to_pylist())


def one(dtype: DataType, value: Any) -> str:
    """The JSON text of ``value`` as the body's only field ``v``."""
    schema = StructType([StructField("v", dtype)])
    body = bodies(schema, [{"v": value}])[0].decode()
    prefix = '{"v":'
    assert body.startswith(prefix)
    assert body.endswith("}")
    return body[len(prefix) : -1]


@pytest.mark.parametrize(
    ("dtype", "value", "text"),
    [
        (DoubleType(), 1e10, "1e+10"),
        (DoubleType(), 1e16, "1e+16"),
        (DoubleType(), 1e-5, "0.00001"),
        (DoubleType(), 1.5e-9, "1.5e-9"),
        (DoubleType(), 0.001, "0.001"),
        (DoubleType(), 12345678.0, "12345678.0"),
        (DoubleType(), -0.0, "-0.0"),
        (DoubleType(), math.nan, '"NaN"'),
        (DoubleType(), -math.inf, '"-Infinity"'),
        (FloatType(), 1.100000023841858, "1.1"),
        (DecimalType(10, 7), Decimal("0.0000001"), "1E-7"),
        (DecimalType(10, 7), Decimal("0"), "0E-7"),
        (DecimalType(5, 2), Decimal("12.5"), "12.50"),
        (BinaryType(), b"\x00\xff\x10", '"AP8Q"'),
        (
            TimestampType(),
            dt.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC),
            '"2024-01-02T03:04:05.123456Z"',
        ),
        (TimestampNTZType(), dt.datetime(2024, 1, 2, 3, 4, 5), '"2024-01-02T03:04:05.000000"'),
        (
            DayTimeIntervalType(0, 3),
            dt.timedelta(days=-3, seconds=5, microseconds=120000),
            "\"INTERVAL '-2 23:59:54.88' DAY TO SECOND\"",
        ),
        (DayTimeIntervalType(1, 1), dt.timedelta(days=1), "\"INTERVAL '24' HOUR\""),
        (StringType(), 'é"\\\n\x01\x1f\x7f\u2028', '"é\\"\\\\\\n\\u0001\\u001F\x7f\u2028"'),
        (StringType(), "\b\f\t\r", '"\\b\\f\\t\\r"'),
        (ArrayType(IntegerType()), [1, None], "[1,null]"),
        (MapType(IntegerType(), StringType()), [(1, "a")], '{"1":"a"}'),
        (
            StructType([StructField("a", IntegerType()), StructField("b", StringType())]),
            {"a": None, "b": "x"},
            '{"a":null,"b":"x"}',
        ),
        (IntegerType(), None, "null"),
    ],
)
def test_text_of_each_type(dtype: DataType, value: Any, text: str) -> None:
    """Each type is written as docs/encoding.md's table says (tests/integration/test_encoders_spark.py reads
    every type back with Spark's JSON reader)."""
    assert one(dtype, value) == text


def test_field_names_are_escaped() -> None:
    """Column names with quotes, backslashes and non-ASCII characters are valid JSON keys."""
    schema = StructType([StructField('a"b\\ü', IntegerType())])
    assert bodies(schema, [{'a"b\\ü': 1}]) == ['{"a\\"b\\\\ü":1}'.encode()]


def test_sliced_batches_encode_only_their_rows() -> None:
    """A sliced batch (non-zero offsets in nested arrays) encodes exactly its own rows."""
    schema = StructType(
        [StructField("xs", ArrayType(StringType())), StructField("m", MapType(StringType(), IntegerType()))]
    )
    batch = batch_of(
        schema, [{"xs": ["a"], "m": [("k", 1)]}, {"xs": ["b", "c"], "m": None}, {"xs": None, "m": []}]
    )
    frame = InsertEncoder().encode_arrow(batch.slice(1, 2), schema=schema)
    assert frame.column(BODY).to_pylist() == [b'{"xs":["b","c"],"m":null}', b'{"xs":null,"m":{}}']


def test_schema_is_derived_from_arrow_when_omitted() -> None:
    """Without a Spark schema, tz-less Arrow timestamps are timestamp_ntz and durations day-to-second."""
    batch = pa.RecordBatch.from_pydict(
        {"t": pa.array([dt.datetime(2024, 1, 1)], pa.timestamp("us")), "d": pa.array([dt.timedelta(1)])}
    )
    body = InsertEncoder().encode_arrow(batch).column(BODY)[0].as_py()
    assert body == b'{"t":"2024-01-01T00:00:00.000000","d":"INTERVAL \'1 00:00:00\' DAY TO SECOND"}'


def test_decoder_reads_missing_fields_as_null_and_ignores_unknown_ones() -> None:
    """decode_json fills absent fields with null and skips fields the schema does not have."""
    schema = StructType([StructField("a", IntegerType()), StructField("b", StringType())])
    decoded = decode_json([b'{"a":1,"zzz":2}', b'{"b":"x"}'], schema)
    assert decoded.to_pylist() == [{"a": 1, "b": None}, {"a": None, "b": "x"}]


def test_decoder_keeps_decimal_digits_exactly() -> None:
    """Decimals decode without passing through binary floating point."""
    schema = StructType([StructField("d", DecimalType(38, 18))])
    decoded = decode_json([b'{"d":12345678901234567890.123456789012345678}'], schema)
    assert decoded.column("d")[0].as_py() == Decimal("12345678901234567890.123456789012345678")
