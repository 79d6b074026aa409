"""Upsert encoding in the flink-connector-s2 format (Arrow path), op mapping, compaction and decoding."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from s2_sink.encoders import BODY, ERROR, HEADERS, KEY, UpsertChange, UpsertEncoder, decode_upsert
from s2_sink.encoders._frame import STREAM
from s2_sink.errors import ConfigError, EncodeError
from tests.unit.encoders._strategies import atomic_types, normalized, schema_and_rows, values_of

SCHEMA = StructType(
    [
        StructField("index", StringType()),
        StructField("content", IntegerType()),
        StructField("op", StringType()),
    ]
)


def batch(rows: list[dict[str, Any]], schema: StructType = SCHEMA) -> pa.RecordBatch:
    """An Arrow batch of ``rows`` typed by ``schema``."""
    return pa.RecordBatch.from_pylist(rows, schema=to_arrow_schema(schema))


def records(frame: pa.RecordBatch) -> list[tuple[list[tuple[bytes, bytes]], bytes]]:
    """The frame's (headers, body) pairs, as the writer would append them."""
    return [([(h["name"], h["value"]) for h in row[HEADERS] or []], row[BODY]) for row in frame.to_pylist()]


def test_golden_flink_connector_record() -> None:
    """index="265", content=4 encodes to the connector README's record, byte for byte."""
    rows = [{"index": "265", "content": 4, "op": None}]
    frame = UpsertEncoder(["index"], exclude_columns=["op"]).encode_arrow(batch(rows))
    assert records(frame) == [([(b"@key", b'{"index":"265"}'), (b"@action", b"u")], b'{"content":4}')]
    assert frame.column(KEY).to_pylist() == [b'{"index":"265"}']


@pytest.mark.parametrize(
    ("op", "action"),
    [
        ("insert", b"u"),
        ("update_postimage", b"u"),
        ("delete", b"d"),
        ("+I", b"u"),
        ("+U", b"u"),
        ("-D", b"d"),
        ("u", b"u"),
        ("d", b"d"),
    ],
)
def test_op_values_map_to_actions(op: str, action: bytes) -> None:
    """Delta CDF change types, Flink row kinds and u/d map to the connector's @action codes."""
    frame = UpsertEncoder(["index"], op_column="op").encode_arrow(
        batch([{"index": "1", "content": 7, "op": op}])
    )
    [(headers, body)] = records(frame)
    assert headers == [(b"@key", b'{"index":"1"}'), (b"@action", action)]
    assert body == (b'{"content":7}' if action == b"u" else b"")


@pytest.mark.parametrize("op", ["update_preimage", "-U"])
def test_update_preimages_are_dropped(op: str) -> None:
    """The old image of an update produces no record."""
    rows = [{"index": "1", "content": 1, "op": op}, {"index": "2", "content": 2, "op": "+I"}]
    frame = UpsertEncoder(["index"], op_column="op").encode_arrow(batch(rows))
    assert frame.column(KEY).to_pylist() == [b'{"index":"2"}']


def test_unknown_op_is_an_error_naming_the_value() -> None:
    """An op value no mapping knows raises EncodeError quoting it and the column."""
    rows = [{"index": "1", "content": 1, "op": "upsert"}]
    with pytest.raises(EncodeError, match=r"op column 'op' has unknown value 'upsert'"):
        UpsertEncoder(["index"], op_column="op").encode_arrow(batch(rows))


def test_null_op_is_an_error() -> None:
    """A null op is not silently treated as an upsert."""
    with pytest.raises(EncodeError, match=r"op column 'op' is null"):
        UpsertEncoder(["index"], op_column="op").encode_arrow(
            batch([{"index": "1", "content": 1, "op": None}])
        )


def test_null_key_is_an_error_naming_the_column_and_stream() -> None:
    """A null key column raises EncodeError naming the column (and the stream when given)."""
    rows = [{"index": None, "content": 1, "op": "+I"}]
    with pytest.raises(EncodeError, match=r"stream 'cdc': upsert key column 'index' is null"):
        UpsertEncoder(["index"], op_column="op").encode_arrow(batch(rows), stream="cdc")


def test_errors_can_stay_in_the_frame() -> None:
    """errors="column" leaves each bad row's reason in _s2_error and encodes the others."""
    rows = [{"index": None, "content": 1, "op": "+I"}, {"index": "2", "content": 2, "op": "+I"}]
    frame = UpsertEncoder(["index"], op_column="op").encode_arrow(batch(rows), errors="column")
    assert frame.column(ERROR).to_pylist() == ["upsert key column 'index' is null", None]


def test_compaction_keeps_the_last_change_per_key_in_batch_order() -> None:
    """compact=True keeps each key's last change and the survivors' relative order."""
    rows = [
        {"index": "a", "content": 1, "op": "+I"},
        {"index": "b", "content": 1, "op": "+I"},
        {"index": "a", "content": 2, "op": "+U"},
        {"index": "c", "content": 1, "op": "+I"},
        {"index": "b", "content": None, "op": "-D"},
        {"index": "c", "content": 1, "op": "-U"},
    ]
    frame = UpsertEncoder(["index"], op_column="op", compact=True).encode_arrow(batch(rows))
    assert records(frame) == [
        ([(b"@key", b'{"index":"a"}'), (b"@action", b"u")], b'{"content":2}'),
        ([(b"@key", b'{"index":"c"}'), (b"@action", b"u")], b'{"content":1}'),
        ([(b"@key", b'{"index":"b"}'), (b"@action", b"d")], b""),
    ]


def test_compaction_keeps_a_keys_last_change_in_each_target_stream() -> None:
    """Rows that carry their target stream (`S2Writer`'s routed rows, written from the driver): compact=True
    keeps a key's last change per stream, so each stream ends as its uncompacted changes would; a row
    without a target is a bad row, kept."""
    schema = StructType([*SCHEMA.fields, StructField(STREAM, StringType())])
    rows = [
        {"index": "a", "content": 1, "op": "+I", STREAM: "s1"},
        {"index": "a", "content": 2, "op": "+U", STREAM: "s1"},
        {"index": "a", "content": 3, "op": "+U", STREAM: "s2"},
        {"index": "a", "content": 4, "op": "+U", STREAM: None},
    ]
    encoder = UpsertEncoder(["index"], op_column="op", compact=True)
    frame = encoder.encode_frame(batch(rows, schema), schema=schema, keep=[STREAM], exclude=[STREAM])
    assert [(r[STREAM], r[BODY]) for r in frame.to_pylist()] == [
        ("s1", b'{"content":2}'),
        ("s2", b'{"content":3}'),
        (None, b'{"content":4}'),
    ]


def test_user_headers_follow_the_changelog_headers() -> None:
    """Extra headers from headers_column come after @key and @action, in their own order."""
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("id", IntegerType()),
            StructField("v", StringType()),
            StructField("h", ArrayType(header)),
        ]
    )
    rows = [
        {"id": 1, "v": "x", "h": [{"key": "trace", "value": b"t1"}, {"key": "src", "value": b"s"}]},
        {"id": 2, "v": "y", "h": None},
        {"id": 3, "v": "z", "h": []},
    ]
    frame = UpsertEncoder(["id"], headers_column="h").encode_arrow(batch(rows, schema), schema=schema)
    assert [h for h, _ in records(frame)] == [
        [(b"@key", b'{"id":1}'), (b"@action", b"u"), (b"trace", b"t1"), (b"src", b"s")],
        [(b"@key", b'{"id":2}'), (b"@action", b"u")],
        [(b"@key", b'{"id":3}'), (b"@action", b"u")],
    ]


def test_composite_keys_keep_the_given_order() -> None:
    """The @key object lists the key columns in key_columns order, not schema order."""
    schema = StructType(
        [StructField("a", IntegerType()), StructField("b", StringType()), StructField("c", IntegerType())]
    )
    frame = UpsertEncoder(["c", "a"]).encode_arrow(batch([{"a": 1, "b": "x", "c": 3}], schema), schema=schema)
    assert records(frame) == [([(b"@key", b'{"c":3,"a":1}'), (b"@action", b"u")], b'{"b":"x"}')]


def test_decode_upsert_reads_the_golden_record() -> None:
    """decode_upsert turns the connector's record back into key, action and value."""
    changes = decode_upsert(
        [
            ([(b"@key", b'{"index":"265"}'), (b"@action", b"u")], b'{"content":4}'),
            ([(b"@key", b'{"index":"1"}'), (b"@action", b"d")], b""),
        ]
    )
    assert changes == [
        UpsertChange(key={"index": "265"}, action="u", value={"content": 4}),
        UpsertChange(key={"index": "1"}, action="d", value=None),
    ]


def test_decode_upsert_needs_both_headers() -> None:
    """A record without @key/@action is refused like the Flink connector refuses it."""
    with pytest.raises(EncodeError, match="key or action not found"):
        decode_upsert([([(b"@key", b"{}")], b"{}")])


def test_decode_upsert_takes_the_first_key_and_action_headers() -> None:
    """A user header named @key or @action after the changelog's two does not replace them: decode_upsert
    reads the first of each, as spark.read.format("s2") with s2.format=upsert does."""
    headers = [(b"@key", b'{"id":1}'), (b"@action", b"u"), (b"@key", b'{"id":2}'), (b"@action", b"d")]
    assert decode_upsert([(headers, b'{"v":3}')]) == [UpsertChange(key={"id": 1}, action="u", value={"v": 3})]


def test_key_columns_must_be_given() -> None:
    """An empty or string key_columns is a ConfigError at construction."""
    with pytest.raises(ConfigError, match="key_columns"):
        UpsertEncoder([])
    with pytest.raises(ConfigError, match="key_columns"):
        UpsertEncoder("index")


_OWN_KEY = "key_column"  # longer than a drawn column name (at most 8 characters): no clash


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema_and_rows(), st.data())
def test_upsert_round_trips_through_decode_upsert(
    case: tuple[StructType, list[dict[str, Any]]], data: st.DataObject
) -> None:
    """Any split of any schema into scalar key columns and value columns encodes and decodes back to the
    same key and value objects."""
    schema, rows = case
    scalar = [f.name for f in schema.fields if not isinstance(f.dataType, ArrayType | MapType | StructType)]
    if not scalar:  # every column nests: key on one of its own (drawn, not rejected: 3 in 4 schemas would be)
        key_type = data.draw(atomic_types)
        schema = StructType([StructField(_OWN_KEY, key_type), *schema.fields])
        rows = [{_OWN_KEY: data.draw(values_of(key_type)), **r} for r in rows]
        scalar = [_OWN_KEY]
    keys = data.draw(st.lists(st.sampled_from(scalar), min_size=1, unique=True))
    rows = [r for r in rows if all(r[k] is not None for k in keys)]
    arrow = batch(rows, schema)
    frame = UpsertEncoder(keys).encode_arrow(arrow, schema=schema)
    changes = decode_upsert(records(frame), schema=schema)

    expected = [
        UpsertChange(
            key={k: r[k] for k in keys}, action="u", value={k: v for k, v in r.items() if k not in keys}
        )
        for r in arrow.to_pylist()
    ]
    assert [normalized((c.key, c.value)) for c in changes] == [normalized((e.key, e.value)) for e in expected]


_HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
_WITH_HEADERS = StructType(
    [
        StructField("id", IntegerType()),
        StructField("op", StringType()),
        StructField("h", ArrayType(_HEADER)),
    ]
)
_USER_HEADERS = st.one_of(
    st.none(),
    st.lists(st.fixed_dictionaries({"key": st.sampled_from(["a", "trace"]), "value": st.binary(max_size=3)})),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "id": st.integers(-5, 5),
                "op": st.sampled_from(["u", "d", "insert", "delete", "?"]),
                "h": _USER_HEADERS,
            }
        ),
        max_size=8,
    ),
    st.integers(0, 3),
    st.booleans(),
)
def test_changelog_headers_of_any_slice_match_row_by_row(
    rows: list[dict[str, Any]], skip: int, user_headers: bool
) -> None:
    """@key, @action (empty for an unknown op) then the row's own headers, for every row of a sliced batch,
    with and without a headers column."""
    arrow = batch(rows, _WITH_HEADERS).slice(min(skip, len(rows)))
    encoder = UpsertEncoder(["id"], op_column="op", headers_column="h" if user_headers else None)
    frame = encoder.encode_arrow(arrow, schema=_WITH_HEADERS, errors="column")
    actions = {"u": b"u", "insert": b"u", "d": b"d", "delete": b"d", "?": b""}
    expected = [
        [
            (b"@key", b'{"id":%d}' % r["id"]),
            (b"@action", actions[r["op"]]),
            *[(h["key"].encode(), h["value"]) for h in (r["h"] or []) if user_headers],
        ]
        for r in arrow.to_pylist()
    ]
    assert [h for h, _ in records(frame)] == expected
