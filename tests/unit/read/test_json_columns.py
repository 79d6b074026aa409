"""Bulk JSON decoding of read records: exactly the record-by-record decoder's rows, or its error."""

from __future__ import annotations

import datetime as dt
import math

import orjson
import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from s2_sink._read.rows import record_rows as _formats
from s2_sink._read.rows.record_rows import decode_bodies, decode_bodies_bulk
from s2_sink.encoders import BODY, InsertEncoder
from s2_sink.encoders._arrow_types import to_arrow_schema
from s2_sink.errors import ReadError

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("name", StringType()),
        StructField("score", DoubleType()),
        StructField("ok", BooleanType()),
        StructField("ts", TimestampType()),
        StructField("n", IntegerType()),
        StructField("tiny", ByteType()),
    ]
)


def _text(value: object) -> str:
    return orjson.dumps(value).decode()


numbers = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(_text),
    st.sampled_from(["1.0", "1e2", "-0", "300", "-129", "1e400", "NaN", "Infinity", "-Infinity", "01"]),
)
strings = st.one_of(
    st.text(max_size=12).map(_text),  # non-ASCII, escapes (\n, \", \u0001)
    st.sampled_from(['"\\ud800"', '"a\\u00e9b"', '"5"', '"NaN"', '"true"']),
)
timestamps = st.one_of(
    st.datetimes(min_value=dt.datetime(1000, 1, 1), max_value=dt.datetime(8999, 12, 31)).map(
        lambda d: '"' + d.isoformat(timespec="microseconds")[:-3] + 'Z"'
    ),
    st.builds(
        lambda date, frac, zone: f'"{date}T12:34:56{frac}{zone}"',
        st.sampled_from(["2023-11-14", "2024-02-29", "2023-02-29", "2023-02-30", "0999-12-31", "9999-12-31"]),
        st.sampled_from(["", ".1", ".12", ".123456", ".1234567", "."]),
        st.sampled_from(["Z", "+05:30", "-08:00", "+24:00", "", "+0530", "z"]),
    ),
    st.sampled_from(
        ['"2023-11-14T23:59:60Z"', '"2023-11-14T24:00:00Z"', '"2023-11-14 12:00:00Z"', '"2023-11-14"']
    ),
)
values = st.one_of(numbers, strings, timestamps, st.sampled_from(["true", "false", "null", "{}", "[1]"]))
fields = st.lists(
    st.tuples(st.sampled_from([f.name for f in SCHEMA.fields] + ["other"]), values), max_size=9
).map(lambda pairs: "{" + ",".join(f'"{k}":{v}' for k, v in pairs) + "}")
typed_values = {
    "id": st.integers(-(2**63), 2**63 - 1).map(str),
    "name": st.text(max_size=12).map(_text),
    "score": st.one_of(
        st.floats(allow_nan=False, allow_infinity=False).map(_text), st.integers(-(10**20), 10**20).map(str)
    ),
    "ok": st.sampled_from(["true", "false"]),
    "ts": timestamps,
    "n": st.integers(-(2**31), 2**31 - 1).map(str),
    "tiny": st.integers(-128, 127).map(str),
}
typed = st.fixed_dictionaries(
    {}, optional={k: st.one_of(v, st.just("null")) for k, v in typed_values.items()}
).map(lambda row: "{" + ", ".join(f'"{k}": {v}' for k, v in row.items()) + "}")
odd_bodies = st.sampled_from(
    [
        b"",
        b"[1]",
        b"{}{}",
        b'{"id":1}\n',
        b"\xff",
        b' {"id":1}',
        b"null",
        b'{"id":1} ',
        b'{"name":"\xff"}',
        b"{}",
    ]
)
bodies = st.lists(
    st.one_of(
        typed.map(str.encode),
        typed.map(str.encode),
        fields.map(str.encode),
        odd_bodies,
        st.just(b'{"id":1,"name":"x","ts":"2023-11-14T22:13:21.234Z"}'),
    ),
    min_size=1,
    max_size=8,
)


def _outcome(decode: object) -> str:
    try:
        batch = decode()  # type: ignore[operator]
    except ReadError as exc:
        return f"ReadError: {exc}"
    return repr(batch.to_pylist())  # repr: NaN compares equal to itself


@settings(max_examples=400, deadline=None)
@given(bodies)
@example([b'{"id":9223372036854775808}'])  # beyond int64: once an OverflowError instead of a ReadError
@example([b'{"score":-0}'])  # an integer -0 into a double: once -0.0 in bulk, 0.0 record by record
def test_bulk_json_gives_the_record_decoders_rows_or_error(texts: list[bytes]) -> None:
    """Any bodies -- well typed, of the wrong JSON type, out of range, malformed, empty, two objects,
    NaN tokens, invalid UTF-8, odd timestamps -- decode in bulk to exactly what the record-by-record
    decoder gives, or fail with exactly its ReadError."""
    bulk = _outcome(lambda: decode_bodies_bulk(pa.array(texts, pa.binary()), SCHEMA, where="stream 's'"))
    one_by_one = _outcome(lambda: decode_bodies(texts, SCHEMA, where="stream 's'"))
    assert bulk == one_by_one


def test_minus_zero_into_a_double_is_what_sparks_json_reader_gives() -> None:
    """Spark's own JSON reader (``from_json``, ``spark.read.json``; pyspark 4.1) reads the integer ``-0``
    into a double column as 0.0 and ``-0.0`` / ``-0e0`` as -0.0: both decoders give exactly that, the sign
    included (an integer ``-0`` sends the bulk reader's bodies record by record), and a ``-0`` that is part
    of a longer number or a string changes nothing. tests/integration/test_datasource_read.py checks the
    same bodies against Spark itself."""
    schema = StructType([StructField("x", DoubleType()), StructField("s", StringType())])
    texts = [b'{"x": -0}', b'{"x":-0,"s":"a"}', b'{"x": -0.0}', b'{"x": -0e0}', b'{"x": -0E5}', b'{"x": 0}']
    signs = [1.0, 1.0, -1.0, -1.0, -1.0, 1.0]
    for decode in (
        lambda: decode_bodies_bulk(pa.array(texts, pa.binary()), schema, where="stream 's'"),
        lambda: decode_bodies(texts, schema, where="stream 's'"),
    ):
        got = decode().column("x").to_pylist()
        assert got == [0.0] * len(texts)
        assert [math.copysign(1.0, x) for x in got] == signs
    # Without an integer -0 the bodies stay on the bulk reader (strings holding "-0" followed by a digit).
    plain = pa.array([b'{"x": -0.5, "s": "2024-01-05"}', b'{"x": -10, "s": "-07:00"}'], pa.binary())
    assert _formats._arrow_read(plain, to_arrow_schema(schema)) is not None


def test_the_writers_bodies_take_the_bulk_reader() -> None:
    """Bodies as InsertEncoder writes them (the benchmark's shape) are read by Arrow's JSON reader, not
    handed to the record-by-record decoder, and decode to the same rows."""
    schema = StructType(
        [StructField("id", LongType()), StructField("ts", TimestampType()), StructField("u", StringType())]
    )
    rows = [
        {"id": i, "ts": dt.datetime(2023, 11, 14, 22, 13, 21, 234000 + i, tzinfo=dt.UTC), "u": f"user-é{i}"}
        for i in range(50)
    ]
    arrow = pa.RecordBatch.from_pylist(
        rows, schema=pa.schema([("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("u", pa.string())])
    )
    texts = InsertEncoder().encode_arrow(arrow, schema=schema).column(BODY)
    bulk = _formats._arrow_read(texts.cast(pa.binary()), to_arrow_schema(schema))
    assert bulk is not None
    assert bulk.to_pylist() == decode_bodies(texts.to_pylist(), schema, where="s").to_pylist()
    assert [r["id"] for r in bulk.to_pylist()] == list(range(50))


@pytest.mark.parametrize("dtype", [StructType([StructField("x", LongType())]), None])
def test_other_types_decode_record_by_record(dtype: StructType | None) -> None:
    """A schema with a type outside the bulk set (a struct here) or a body-free batch still decodes, by the
    record-by-record decoder."""
    schema = StructType([StructField("id", LongType())] + ([StructField("s", dtype)] if dtype else []))
    texts = [b'{"id":1,"s":{"x":2}}', b'{"id":2}']
    got = decode_bodies_bulk(pa.array(texts, pa.binary()), schema, where="s").to_pylist()
    assert got == decode_bodies(texts, schema, where="s").to_pylist()


# The timestamp texts read in bulk: Arrow's cast reads them as the record-by-record decoder does. Texts off
# the shape go record by record. The check is of the shape only: a month 13 passes it (and fails the cast).
_SHAPED = [
    "2023-11-14T22:13:21Z",
    "1000-01-01T00:00:00Z",  # the first year of the shape
    "8999-12-31T23:59:59Z",  # the last
    "2023-13-45T22:13:21Z",  # no such month or day, but the shape
    "2023-02-29T23:59:60Z",
    "2023-11-14T22:13:21.1Z",
    "2023-11-14T22:13:21.12Z",
    "2023-11-14T22:13:21.123Z",
    "2023-11-14T22:13:21.1234Z",
    "2023-11-14T22:13:21.12345Z",
    "2023-11-14T22:13:21.123456Z",  # six fraction digits: microseconds, what Spark holds
    "2023-11-14T22:13:21+05:30",
    "2023-11-14T22:13:21-08:00",
    "2023-11-14T22:13:21+00:00",
    "2023-11-14T22:13:21+14:00",
    "2023-11-14T22:13:21+23:59",
    "2023-11-14T22:13:21.5-23:59",
]
_OFF_SHAPE = [
    "",
    " ",
    "0999-11-14T22:13:21Z",  # before the year 1000
    "9000-11-14T22:13:21Z",  # from the year 9000
    "12023-11-14T22:13:21Z",
    "+2023-11-14T22:13:21Z",
    "2o23-11-14T22:13:21Z",
    "2023-1-14T22:13:21Z",
    "2023-11-4T22:13:21Z",
    "2023-1x-14T22:13:21Z",
    "2023/11/14T22:13:21Z",
    "2023-11-14 22:13:21Z",  # a space for the T
    "2023-11-14t22:13:21Z",
    "2023-11-14T22:13Z",  # no seconds
    "2023-11-14T2:13:21Z",
    "2023-11-14",
    "2023-11-14T22:13:21",  # no zone
    "2023-11-14T22:13:21z",
    "2023-11-14T22:13:21.Z",  # a point and no digit
    "2023-11-14T22:13:21.1234567Z",  # seven fraction digits, past microseconds
    "2023-11-14T22:13:21.12345678Z",
    "2023-11-14T22:13:21.123456789Z",
    "2023-11-14T22:13:21.12aZ",
    "2023-11-14T22:13:21,123Z",
    "2023-11-14T22:13:21+24:00",  # an hour past 23 in the zone
    "2023-11-14T22:13:21+29:00",
    "2023-11-14T22:13:21+19:60",
    "2023-11-14T22:13:21+0530",
    "2023-11-14T22:13:21+05",
    "2023-11-14T22:13:21,05:30",
    "2023-11-14T22:13:21Z+05:30",
    " 2023-11-14T22:13:21Z",  # a space before
    "2023-11-14T22:13:21Z ",  # or after
    "2023-11-14T22:13:21Z\n",  # a line end after: the end of the text, not of a line
    "x2023-11-14T22:13:21Z",
    "2023-11-14T22:13:21Zx",
]


@pytest.mark.parametrize("text", _SHAPED)
def test_timestamp_texts_of_the_shape_are_read_in_bulk(text: str) -> None:
    assert _formats.timestamps_shaped(pa.array([text], pa.string()))


@pytest.mark.parametrize("text", _OFF_SHAPE)
def test_timestamp_texts_off_the_shape_go_record_by_record(text: str) -> None:
    assert not _formats.timestamps_shaped(pa.array([text], pa.string()))


@pytest.mark.parametrize(
    ("texts", "skip", "shaped"),
    [
        ([], 0, True),
        ([None, None], 0, True),  # nulls are no texts off the shape
        (["2023-11-14T22:13:21Z", None, "2023-11-14T22:13:21.5+01:00"], 0, True),
        (["2023-11-14T22:13:21Z", None, "2023-11-14T22:13:21.5+01:00", "2023-11-14 22:13:21Z"], 0, False),
        (["2023-11-14 22:13:21Z", "2023-11-14T22:13:21Z", None], 1, True),  # the one off it sliced away
        (["2023-11-14T22:13:21Z", "2023-11-14T22:13Z"], 1, False),  # a slice's own text off it
    ],
)
def test_a_column_is_read_in_bulk_when_every_text_has_the_shape(
    texts: list[str | None], skip: int, shaped: bool
) -> None:
    assert _formats.timestamps_shaped(pa.array(texts, pa.string())[skip:]) is shaped


def test_an_integer_beyond_its_field_is_a_read_error_naming_the_field() -> None:
    """A long field holding 2**63 fails as a ReadError naming the field and the record, on both paths."""
    texts = [b'{"id":1}', b'{"id":9223372036854775808}']
    for decode in (
        lambda: decode_bodies_bulk(pa.array(texts, pa.binary()), SCHEMA, where="stream 's'"),
        lambda: decode_bodies(texts, SCHEMA, where="stream 's'"),
    ):
        with pytest.raises(ReadError, match=r"'id' \(bigint\) of record 1"):
            decode()
