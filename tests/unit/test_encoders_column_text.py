"""Column-at-a-time JSON text equals the per-value reference renderings, value for value."""

from __future__ import annotations

import base64
import datetime as dt
import math
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import BinaryType, DoubleType, FloatType, StringType, TimestampNTZType, TimestampType

from s2_sink.encoders._arrow_json import json_fragments, json_string
from s2_sink.encoders._java_text import java_double, java_float

# Doubles drawn from their bit patterns reach every exponent, subnormals and NaN payloads alike.
_DOUBLE_BITS = st.integers(0, 2**64 - 1).map(lambda b: struct.unpack("<d", struct.pack("<Q", b))[0])
_FLOAT_BITS = st.integers(0, 2**32 - 1).map(lambda b: struct.unpack("<f", struct.pack("<I", b))[0])
# Where Java's layout changes: 1e-3 and 1e7, each power of ten, integral values, signed zeros.
_EDGES = [
    0.0,
    -0.0,
    math.nan,
    math.inf,
    -math.inf,
    5e-324,
    2.2250738585072014e-308,
    1.7976931348623157e308,
    0.001,
    0.0009999999999999998,
    9999999.999999998,
    1e7,
    1e-4,
    123.0,
    -1e21,
    2e-3,
    1e23,
    2.0**-44,
    *(10.0**e for e in range(-8, 12)),
]


def text(arr: pa.Array) -> list[str]:
    """Each row's text as the JSON encoder writes a float or double column."""
    return json_fragments(arr, DoubleType() if arr.type == pa.float64() else FloatType()).to_pylist()


def doubles_text(values: list[float | None]) -> list[str | None]:
    """What the column path writes for each double (None for a null)."""
    arr = pa.array(values, pa.float64())
    return [None if v is None else t for v, t in zip(values, text(arr), strict=True)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(), _DOUBLE_BITS, st.sampled_from(_EDGES)), max_size=40))
def test_double_columns_match_the_per_value_rendering(values: list[float]) -> None:
    """Every double, in any mix of layouts, is written as `java_double` writes it alone."""
    assert doubles_text(list(values)) == [java_double(v) for v in values]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(width=32), _FLOAT_BITS), max_size=40))
def test_float_columns_match_the_per_value_rendering(values: list[float]) -> None:
    """Every float32 is written with float32's own shortest digits, as `java_float` writes it."""
    arr = pa.array(values, pa.float32())
    assert text(arr) == [java_float(v) for v in arr.to_pylist()]


def test_a_million_random_doubles_match() -> None:
    """A large sample of bit patterns and of the plain range agrees too (the layout groups at scale)."""
    rng = np.random.default_rng(14)
    values = np.concatenate(
        [
            rng.integers(0, 2**64, 200_000, dtype=np.uint64).view(np.float64),
            rng.uniform(-1e8, 1e8, 50_000),
            rng.uniform(-0.01, 0.01, 50_000),
            np.round(rng.uniform(-1e7, 1e7, 50_000)),
        ]
    )
    got = text(pa.array(values))
    assert got == [java_double(v) for v in values.tolist()]


def test_nulls_and_slices_keep_their_rows() -> None:
    """Null rows read as ``null`` and a sliced column writes only its own rows."""
    arr = pa.array([1.5, None, 1e-9, None, -2.0, 1e300])
    assert json_fragments(arr, DoubleType()).to_pylist() == [
        "1.5",
        "null",
        "1.0E-9",
        "null",
        "-2.0",
        "1.0E300",
    ]
    assert json_fragments(arr.slice(2, 3), DoubleType()).to_pylist() == ["1.0E-9", "null", "-2.0"]
    assert json_fragments(pa.array([0.1], pa.float32()), FloatType()).to_pylist() == ["0.1"]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(st.none(), st.text(), st.text(alphabet=st.characters(max_codepoint=0x7F))), max_size=20
    )
)
def test_string_columns_escape_as_jackson(values: list[str | None]) -> None:
    """Each string is escaped exactly as `json_string` (Jackson's escapes) writes it alone."""
    got = json_fragments(pa.array(values, pa.string()), StringType()).to_pylist()
    assert got == ["null" if v is None else json_string(v) for v in values]


@pytest.mark.parametrize("large", [False, True])
def test_sliced_string_columns_look_only_at_their_rows(large: bool) -> None:
    """A quote in a row sliced off neither changes nor slows the rows that remain."""
    arr = pa.array(['a"', "b", "c\n", "d"], pa.large_string() if large else pa.string())
    assert json_fragments(arr.slice(1, 1), StringType()).to_pylist() == ['"b"']
    assert json_fragments(arr.slice(1, 2), StringType()).to_pylist() == ['"b"', '"c\\n"']


def test_timestamps_with_nulls_slices_and_short_years() -> None:
    """Timestamps keep the ISO layout whether or not the column has nulls, offsets or years below 1000."""
    utc = dt.UTC
    values = [
        dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=utc),
        None,
        dt.datetime(999, 12, 31, 23, 59, 59, tzinfo=utc),
    ]
    arr = pa.array(values, pa.timestamp("us", "UTC"))
    assert json_fragments(arr, TimestampType()).to_pylist() == [
        '"2024-01-02T03:04:05.000006Z"',
        "null",
        '"0999-12-31T23:59:59.000000Z"',
    ]
    ntz = pa.array([v.replace(tzinfo=None) for v in values if v], pa.timestamp("us"))
    assert json_fragments(ntz.slice(1), TimestampNTZType()).to_pylist() == ['"0999-12-31T23:59:59.000000"']


@pytest.mark.parametrize(
    ("value", "shortest", "jdk17"),
    [
        # integral doubles in [1e16, 2^63): JDK 17 prints the long's digits (FloatingDecimal's fast path)
        (2.746825982461736e18, "2.746825982461736E18", "2.7468259824617359E18"),
        (-1.757451960396245e17, "-1.757451960396245E17", "-1.75745196039624512E17"),
        # and a rare case of its general path
        (2.0**-44, "5.684341886080802E-14", "5.6843418860808015E-14"),
    ],
)
def test_doubles_take_the_shortest_digits_as_jdk_19_and_later_do(
    value: float, shortest: str, jdk17: str
) -> None:
    """Both paths write the shortest digits, Double.toString's output since JDK 19; JDK 17 prints some
    values with more digits (its outputs here were taken from a JDK 17 run). The text differs from a JDK 17
    to_json, the double it parses back to does not."""
    assert doubles_text([value]) == [shortest] == [java_double(value)]
    assert float(jdk17) == float(shortest) == value


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=10)), max_size=12), st.integers(0, 3))
def test_binary_columns_are_base64_value_by_value(values: list[bytes | None], skip: int) -> None:
    """Every binary value of any length (empty too), of a sliced column with nulls, is its own padded
    base64 text, as Jackson writes byte arrays."""
    arr = pa.array(values, pa.binary()).slice(min(skip, len(values)))
    expected = ["null" if v is None else '"' + base64.b64encode(v).decode() + '"' for v in arr.to_pylist()]
    assert json_fragments(arr, BinaryType()).to_pylist() == expected
