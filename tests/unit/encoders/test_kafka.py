"""KafkaEncoder on the Arrow path: a Kafka-shaped frame becomes body = value, headers = key + headers."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s2_sink.encoders import BODY, ERROR, HEADERS, KAFKA_KEY_HEADER, KEY, TIMESTAMP, KafkaEncoder
from s2_sink.errors import ConfigError, EncodeError

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))


def kafka_batch(rows: list[dict[str, Any]], **extra: pa.Array) -> pa.RecordBatch:
    """A frame with Kafka's column names and types (binary key and value, as the Kafka source gives)."""
    columns = {
        "key": pa.array([r.get("key") for r in rows], pa.binary()),
        "value": pa.array([r.get("value") for r in rows], pa.binary()),
        "headers": pa.array([r.get("headers") for r in rows], HEADERS_TYPE),
        **extra,
    }
    return pa.RecordBatch.from_pydict(columns)


def records(frame: pa.RecordBatch) -> list[tuple[bytes, list[tuple[bytes, bytes]], bytes | None]]:
    """(body, [(header name, value)], routing key) per record."""
    out = []
    for body, headers, key in zip(
        frame.column(BODY).to_pylist(),
        frame.column(HEADERS).to_pylist(),
        frame.column(KEY).to_pylist(),
        strict=True,
    ):
        out.append((body, [(h["name"], h["value"]) for h in headers or []], key))
    return out


def test_value_key_headers_and_timestamp() -> None:
    """The value is the body; the key is the first header and the routing key; then headers, timestamp."""
    batch = kafka_batch(
        [
            {
                "key": b"k1",
                "value": b"v1",
                "headers": [{"key": "h", "value": b"x"}, {"key": "h", "value": b"y"}],
            },
            {"key": None, "value": b"v2", "headers": None},
            {"key": b"", "value": b"", "headers": []},
        ],
        timestamp=pa.array([dt.datetime(2024, 1, 2, tzinfo=dt.UTC)] * 3, pa.timestamp("us", "UTC")),
        topic=pa.array(["t", "t", "u"]),
        partition=pa.array([0, 1, 2], pa.int32()),
    )
    frame = KafkaEncoder().encode_arrow(batch)
    assert records(frame) == [
        (b"v1", [(KAFKA_KEY_HEADER, b"k1"), (b"h", b"x"), (b"h", b"y")], b"k1"),
        (b"v2", [], None),
        (b"", [(KAFKA_KEY_HEADER, b"")], b""),
    ]
    assert frame.column(TIMESTAMP).to_pylist() == [1704153600000] * 3
    assert frame.column(ERROR).null_count == 3


def test_string_key_and_value_as_utf8_and_optional_columns() -> None:
    """String key and value are written as UTF-8; a frame of only `value` has no headers and no timestamp."""
    batch = pa.RecordBatch.from_pydict({"key": ["ключ"], "value": ["значение"]})
    assert records(KafkaEncoder().encode_arrow(batch)) == [
        ("значение".encode(), [(KAFKA_KEY_HEADER, "ключ".encode())], "ключ".encode())
    ]
    only_value = KafkaEncoder().encode_arrow(pa.RecordBatch.from_pydict({"value": [b"a"]}))
    assert records(only_value) == [(b"a", [], None)]
    assert only_value.column(TIMESTAMP).to_pylist() == [None]


def test_named_columns_are_required_and_typed() -> None:
    """A column named explicitly must exist; value and key must be binary or string (the message says so)."""
    batch = pa.RecordBatch.from_pydict({"value": [b"a"], "id": [1]})
    with pytest.raises(ConfigError, match="'k'"):
        KafkaEncoder(key_column="k").encode_arrow(batch)
    with pytest.raises(ConfigError, match=r"key column 'id' has type bigint.*binary or string"):
        KafkaEncoder(key_column="id").encode_arrow(batch)
    with pytest.raises(ConfigError, match=r"value column 'id' has type bigint"):
        KafkaEncoder(value_column="id").encode_arrow(batch)
    with pytest.raises(ConfigError, match="'value'"):
        KafkaEncoder().encode_arrow(pa.RecordBatch.from_pydict({"body": [b"a"]}))


def test_null_value_is_a_bad_row() -> None:
    """A null value (a Kafka tombstone) is not written as an empty record: the row carries an error."""
    batch = kafka_batch([{"key": b"k", "value": None}, {"key": b"k", "value": b"v"}])
    frame = KafkaEncoder().encode_arrow(batch, errors="column")
    assert frame.column(ERROR).to_pylist() == ["value column 'value' is null", None]
    with pytest.raises(EncodeError, match="value column 'value' is null"):
        KafkaEncoder().encode_arrow(batch, stream="s")


_header = st.fixed_dictionaries({"key": st.text(min_size=1, max_size=3), "value": st.binary(max_size=3)})
_row = st.fixed_dictionaries(
    {
        "key": st.none() | st.binary(max_size=4),
        "value": st.binary(max_size=4),
        "headers": st.none() | st.lists(_header, max_size=3),
    }
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_row, max_size=8), st.integers(0, 8), st.integers(0, 8))
def test_headers_match_a_row_by_row_reference(rows: list[dict[str, Any]], start: int, length: int) -> None:
    """On any rows, also in a sliced batch, a record's headers are the key header (if any), then its own."""
    batch = kafka_batch(rows).slice(start, length)
    expected = []
    for row in rows[start : start + length]:
        key_header = [] if row["key"] is None else [(KAFKA_KEY_HEADER, row["key"])]
        own = [(h["key"].encode(), h["value"]) for h in row["headers"] or []]
        expected.append((row["value"], key_header + own, row["key"]))
    assert records(KafkaEncoder().encode_arrow(batch)) == expected


def test_a_null_headers_row_over_entries_adds_none_of_them() -> None:
    """Arrow lets a null list row cover entries (a filtered or computed column can): they are not its
    headers."""
    entries = pa.array([{"key": f"h{i}", "value": b"%d" % i} for i in range(3)], HEADERS_TYPE.value_type)
    mask = pa.array([False, True, False])
    headers = pa.ListArray.from_arrays(pa.array([0, 1, 2, 3], pa.int32()), entries, mask=mask)
    batch = kafka_batch([{"key": b"k", "value": b"v"}] * 3).set_column(2, "headers", headers)
    assert records(KafkaEncoder().encode_arrow(batch)) == [
        (b"v", [(KAFKA_KEY_HEADER, b"k"), (b"h0", b"0")], b"k"),
        (b"v", [(KAFKA_KEY_HEADER, b"k")], b"k"),
        (b"v", [(KAFKA_KEY_HEADER, b"k"), (b"h2", b"2")], b"k"),
    ]
