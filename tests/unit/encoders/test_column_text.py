"""Column-at-a-time JSON text: numbers that read back as their values, strings escaped as JSON requires,
timestamps in their ISO layout, binary as base64."""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import struct

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import BinaryType, DoubleType, FloatType, StringType, TimestampNTZType, TimestampType

from s2_sink.encoders._arrow_json import json_fragments, json_string
from tests.hypothesis_profiles import examples

# Doubles drawn from their bit patterns reach every exponent, subnormals and NaN payloads alike.
_DOUBLE_BITS = st.integers(0, 2**64 - 1).map(lambda b: struct.unpack("<d", struct.pack("<Q", b))[0])
_FLOAT_BITS = st.integers(0, 2**32 - 1).map(lambda b: struct.unpack("<f", struct.pack("<I", b))[0])
# Where number layouts change: 1e-3 and 1e7, each power of ten, integral values, signed zeros.
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


def _reads_back(texts: list[str], values: list[float], width: int) -> None:
    """Each text is a JSON floating-point number (or Spark's string for NaN and the infinities) that parses
    to exactly its value at the column's width; never a JSON integer, which a reader inferring types would
    take for a long."""
    pack = "<d" if width == 64 else "<f"
    for t, v in zip(texts, values, strict=True):
        if math.isnan(v):
            assert t == '"NaN"'
            continue
        if math.isinf(v):
            assert t == ('"Infinity"' if v > 0 else '"-Infinity"')
            continue
        parsed = json.loads(t)
        assert isinstance(parsed, float), t
        assert struct.pack(pack, parsed) == struct.pack(pack, v), (t, v)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.floats(), _DOUBLE_BITS, st.sampled_from(_EDGES)), max_size=40))
def test_double_columns_read_back_as_the_same_doubles(values: list[float]) -> None:
    """Every double, in any mix of magnitudes, is written as a JSON number that reads back as itself (the
    sign of a zero included)."""
    _reads_back(text(pa.array(values, pa.float64())), values, 64)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.floats(width=32), _FLOAT_BITS), max_size=40))
def test_float_columns_read_back_as_the_same_floats(values: list[float]) -> None:
    """Every float32 is written with digits that read back as the same float32."""
    arr = pa.array(values, pa.float32())
    _reads_back(text(arr), arr.to_pylist(), 32)


def test_a_million_random_doubles_read_back() -> None:
    """A large sample of bit patterns and of the plain range reads back too."""
    rng = np.random.default_rng(14)
    values = np.concatenate(
        [
            rng.integers(0, 2**64, 200_000, dtype=np.uint64).view(np.float64),
            rng.uniform(-1e8, 1e8, 50_000),
            rng.uniform(-0.01, 0.01, 50_000),
            np.round(rng.uniform(-1e7, 1e7, 50_000)),
        ]
    )
    _reads_back(text(pa.array(values)), values.tolist(), 64)


def test_nulls_and_slices_keep_their_rows() -> None:
    """Null rows read as ``null``, a sliced column writes only its own rows, and an integral value keeps a
    fraction (``-2.0``, not ``-2``)."""
    arr = pa.array([1.5, None, 1e-9, None, -2.0, 1e300])
    assert json_fragments(arr, DoubleType()).to_pylist() == ["1.5", "null", "1e-9", "null", "-2.0", "1e+300"]
    assert json_fragments(arr.slice(2, 3), DoubleType()).to_pylist() == ["1e-9", "null", "-2.0"]
    assert json_fragments(pa.array([0.1], pa.float32()), FloatType()).to_pylist() == ["0.1"]


@settings(max_examples=examples(300, fast=60), deadline=None)
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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.none(), st.binary(max_size=10)), max_size=12), st.integers(0, 3))
def test_binary_columns_are_base64_value_by_value(values: list[bytes | None], skip: int) -> None:
    """Every binary value of any length (empty too), of a sliced column with nulls, is its own padded
    base64 text, as Jackson writes byte arrays."""
    arr = pa.array(values, pa.binary()).slice(min(skip, len(values)))
    expected = ["null" if v is None else '"' + base64.b64encode(v).decode() + '"' for v in arr.to_pylist()]
    assert json_fragments(arr, BinaryType()).to_pylist() == expected
