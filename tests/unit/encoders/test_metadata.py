"""Raw bodies, keys, headers, timestamps and metered sizes on the Arrow path; driver-side validation."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    CalendarIntervalType,
    DataType,
    DateType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
    VariantType,
    YearMonthIntervalType,
)
from s2_sdk import Record
from s2_sdk import metered_bytes as sdk_metered_bytes

from s2_sink.encoders import (
    BODY,
    ERROR,
    HEADERS,
    KEY,
    MAX_RECORD_BYTES,
    TIMESTAMP,
    InsertEncoder,
    UpsertEncoder,
    metered_bytes,
)
from s2_sink.errors import ConfigError, EncodeError
from tests.unit.encoders._strategies import batch_of

HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def schema(**columns: DataType) -> StructType:
    """A schema from keyword column types."""
    return StructType([StructField(name, t) for name, t in columns.items()])


def test_raw_value_is_the_body_and_key_the_key() -> None:
    """format="raw": the value column is the body as is (strings as UTF-8), key column the record key."""
    s = schema(key=StringType(), value=StringType(), other=IntegerType())
    frame = InsertEncoder("raw", key_column="key").encode_arrow(
        batch_of(s, [{"key": "k1", "value": "héllo", "other": 1}, {"key": None, "value": "", "other": 2}]),
        schema=s,
    )
    assert frame.column(BODY).to_pylist() == ["héllo".encode(), b""]
    assert frame.column(KEY).to_pylist() == [b"k1", None]


def test_raw_null_value_is_an_error() -> None:
    """A null raw value is refused rather than written as an empty body."""
    s = schema(value=BinaryType())
    with pytest.raises(EncodeError, match=r"value column 'value' is null"):
        InsertEncoder("raw").encode_arrow(batch_of(s, [{"value": None}]), schema=s)


def test_json_key_column_stays_in_the_body() -> None:
    """In JSON mode the key column is both the record key and a body field; integral keys become text."""
    s = schema(id=LongType(), v=StringType())
    frame = InsertEncoder(key_column="id").encode_arrow(batch_of(s, [{"id": 42, "v": "x"}]), schema=s)
    assert frame.column(KEY).to_pylist() == [b"42"]
    assert frame.column(BODY).to_pylist() == [b'{"id":42,"v":"x"}']


def test_headers_and_timestamp_columns_are_metadata_not_body() -> None:
    """Kafka-shaped headers become record headers, a timestamp column epoch ms; neither is in the body."""
    s = schema(v=IntegerType(), h=ArrayType(HEADER), ts=TimestampType())
    when = dt.datetime(2024, 1, 2, 3, 4, 5, 678999, tzinfo=dt.UTC)
    rows = [{"v": 1, "h": [{"key": "a", "value": b"1"}, {"key": "b", "value": None}], "ts": when}]
    frame = InsertEncoder(headers_column="h", timestamp_column="ts").encode_arrow(batch_of(s, rows), schema=s)
    assert frame.column(BODY).to_pylist() == [b'{"v":1}']
    assert frame.column(HEADERS).to_pylist() == [
        [{"name": b"a", "value": b"1"}, {"name": b"b", "value": b""}]
    ]
    assert frame.column(TIMESTAMP).to_pylist() == [int(when.timestamp() * 1000)]


def test_millisecond_timestamps_pass_through_and_negative_ones_fail() -> None:
    """An integral timestamp column is taken as ms; a negative value is an error naming the column."""
    s = schema(v=IntegerType(), ms=LongType())
    enc = InsertEncoder(timestamp_column="ms")
    ok = enc.encode_arrow(batch_of(s, [{"v": 1, "ms": 1700000000123}, {"v": 2, "ms": None}]), schema=s)
    assert ok.column(TIMESTAMP).to_pylist() == [1700000000123, None]
    with pytest.raises(EncodeError, match=r"timestamp column 'ms' is before 1970-01-01.*: -5"):
        enc.encode_arrow(batch_of(s, [{"v": 1, "ms": -5}]), schema=s)


def test_empty_header_name_is_an_error() -> None:
    """S2 reserves the empty header name for command records, so an empty or null key is refused."""
    s = schema(v=IntegerType(), h=ArrayType(HEADER))
    rows = [{"v": 1, "h": [{"key": "ok", "value": b""}]}, {"v": 2, "h": [{"key": "", "value": b"x"}]}]
    frame = InsertEncoder(headers_column="h").encode_arrow(batch_of(s, rows), schema=s, errors="column")
    assert frame.column(ERROR)[0].as_py() is None
    assert "headers column 'h' has an entry with a null or empty key" in frame.column(ERROR)[1].as_py()


def test_record_over_one_mebibyte_names_stream_key_and_size() -> None:
    """A record over 1 MiB metered raises EncodeError naming the stream, the key and the metered size."""
    s = schema(key=StringType(), value=BinaryType())
    body = b"x" * (MAX_RECORD_BYTES - 8)  # exactly 1 MiB metered: allowed
    enc = InsertEncoder("raw", key_column="key")
    enc.encode_arrow(batch_of(s, [{"key": None, "value": body}]), schema=s)
    with pytest.raises(EncodeError) as info:
        enc.encode_arrow(batch_of(s, [{"key": "big-1", "value": body + b"!"}]), schema=s, stream="events")
    assert str(info.value) == (
        "stream 'events': record of 1048577 metered bytes exceeds S2's 1 MiB (1048576 bytes) record limit"
        " (key big-1)"
    )


def test_upsert_oversize_counts_the_changelog_headers() -> None:
    """The upsert size check includes the @key and @action headers, and names the key."""
    s = schema(id=IntegerType(), v=StringType())
    v = "x" * (MAX_RECORD_BYTES - 8 - len('{"v":""}'))  # body alone is exactly 1 MiB metered
    frame = UpsertEncoder(["id"]).encode_arrow(batch_of(s, [{"id": 7, "v": v}]), schema=s, errors="column")
    assert frame.column(ERROR)[0].as_py().endswith('(key {"id":7})')


headers_lists = st.one_of(
    st.none(), st.lists(st.tuples(st.binary(min_size=1, max_size=8), st.binary(max_size=8)), max_size=4)
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.binary(max_size=64), headers_lists), max_size=20), st.integers(0, 5))
def test_metered_bytes_equals_the_sdk(records: list[tuple[bytes, Any]], offset: int) -> None:
    """metered_bytes over Arrow columns (sliced too) equals s2_sdk.metered_bytes record by record."""
    bodies = pa.array([b for b, _ in records], pa.binary())
    headers = pa.array(
        [None if h is None else [{"name": n, "value": v} for n, v in h] for _, h in records],
        pa.list_(pa.struct([("name", pa.binary()), ("value", pa.binary())])),
    )
    sizes = metered_bytes(bodies.slice(offset), headers.slice(offset)).to_pylist()
    expected = [sdk_metered_bytes([Record(body=b, headers=h or [])]) for b, h in records[offset:]]
    assert sizes == expected


@pytest.mark.parametrize(
    ("dtype", "words"),
    [
        (YearMonthIntervalType(), "interval year to month"),
        (CalendarIntervalType(), "interval"),
        (VariantType(), "variant"),
        (MapType(DateType(), IntegerType()), "map with date keys"),
        (ArrayType(StructType([StructField("t", CalendarIntervalType())])), "'x[].t'"),
    ],
)
def test_unsupported_types_fail_validation_naming_the_column(dtype: DataType, words: str) -> None:
    """validate() raises ConfigError naming the column and its type before any row is touched."""
    with pytest.raises(ConfigError, match="column 'x") as info:
        InsertEncoder().validate(schema(x=dtype))
    assert words in str(info.value)


@pytest.mark.parametrize(
    ("encoder", "message"),
    [
        (InsertEncoder("raw"), "value column 'value' is not in the DataFrame"),
        (InsertEncoder(key_column="k"), "key column 'k' is not in the DataFrame"),
        (UpsertEncoder(["id", "nope"]), "upsert key column 'nope' is not in the DataFrame"),
        (UpsertEncoder(["id"], op_column="op"), "op column 'op' is not in the DataFrame"),
        (InsertEncoder(headers_column="hh"), "headers column 'hh' is not in the DataFrame"),
        (InsertEncoder(timestamp_column="t"), "timestamp column 't' is not in the DataFrame"),
    ],
)
def test_missing_columns_fail_validation(encoder: InsertEncoder | UpsertEncoder, message: str) -> None:
    """A missing key, op, value, headers or timestamp column is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=message):
        encoder.validate(schema(id=IntegerType(), v=StringType()))


@pytest.mark.parametrize(
    ("encoder", "columns", "message"),
    [
        (InsertEncoder("raw"), {"value": IntegerType()}, "value column 'value' has type int"),
        (
            UpsertEncoder(["id"], op_column="op"),
            {"id": IntegerType(), "op": IntegerType()},
            "op column 'op' has type int",
        ),
        (InsertEncoder(headers_column="h"), {"h": StringType()}, "headers column 'h' has type string"),
        (
            InsertEncoder(timestamp_column="t"),
            {"t": TimestampNTZType()},
            "timestamp column 't' has type timestamp_ntz",
        ),
        (InsertEncoder(key_column="k"), {"k": DateType()}, "key column 'k' has type date"),
    ],
)
def test_wrong_column_types_fail_validation(
    encoder: InsertEncoder | UpsertEncoder, columns: dict[str, DataType], message: str
) -> None:
    """A metadata column of the wrong type is a ConfigError naming the column and its type."""
    with pytest.raises(ConfigError, match=message):
        encoder.validate(schema(**columns))


def test_unknown_format_is_rejected() -> None:
    """format must be json or raw."""
    with pytest.raises(ConfigError, match="format must be 'json' or 'raw', got 'avro'"):
        InsertEncoder("avro")  # type: ignore[arg-type]


def test_encoders_pickle() -> None:
    """Encoders are plain data: they pickle to executors and compare by their options."""
    import pickle

    enc = UpsertEncoder(["id"], op_column="op", compact=True)
    clone = pickle.loads(pickle.dumps(enc))
    assert repr(clone) == repr(enc)
