"""The kafka and upsert read formats built from record columns equal, batch for batch and error for error,
what the record-by-record reference (`records_to_batch`, `materialize`) builds from the same records."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import ArrayType, LongType, StringType, StructField, StructType, TimestampType
from s2_sdk import SequencedRecord

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink._read.rows.schemas import KAFKA_SCHEMA, UPSERT_SCHEMA, rows_kind
from s2_sink._read.rows.upsert_rows import materialized_batches, splice_objects
from s2_sink._wire.columns import RecordColumns
from s2_sink._wire.read_batch import parse_read_batch
from s2_sink.datasource._readers import batch_of, columns_to_batch
from s2_sink.encoders import KAFKA_KEY_HEADER
from s2_sink.encoders._arrow_types import to_arrow_schema
from s2_sink.errors import ReadError
from tests.hypothesis_profiles import examples
from tests.rows_by_record import materialize, records_to_batch
from tests.unit.wire.test_read_batch import _message, bodies, small_blobs

SETTINGS = settings(
    max_examples=examples(200, fast=40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _materialized(schema: StructType, parts: list[RecordColumns], rows: int = 1000) -> list[pa.RecordBatch]:
    """A materialized read's batches, as a task makes them (the rows kind decided as the driver does)."""
    to_batch = batch_of(rows_kind("upsert", schema))
    return list(materialized_batches(to_batch, schema, "st", parts, to_arrow_schema(schema), rows=rows))


TYPED_UPSERT = StructType(
    [
        StructField("id", LongType()),
        StructField("_s2_action", StringType()),
        StructField("name", StringType()),
        StructField("_s2_seq_num", LongType()),
        StructField("_s2_timestamp", TimestampType()),
    ]
)
# Only the change's action and position (no decoded column), and a column type only the record-by-record
# decoder reads.
TYPED_ACTION_ONLY = StructType(
    [StructField("_s2_action", StringType()), StructField("_s2_seq_num", LongType())]
)
TYPED_NESTED = StructType([StructField("name", StringType()), StructField("id", ArrayType(LongType()))])
UPSERT_PROJECTION = StructType([UPSERT_SCHEMA["value"], UPSERT_SCHEMA["seq_num"], UPSERT_SCHEMA["action"]])
KAFKA_PROJECTION = StructType([KAFKA_SCHEMA["headers"], KAFKA_SCHEMA["key"]])

# Header names the formats give a meaning to, beside arbitrary (binary, non-UTF-8, empty) ones.
special_names = st.sampled_from([KAFKA_KEY_HEADER, TAG_HEADER, b"@key", b"@action", b"h"])
kafka_headers = st.lists(st.tuples(st.one_of(special_names, small_blobs), small_blobs), max_size=6)

# Key and value texts: JSON objects with and without whitespace (inside and around, every kind bytes.strip
# strips), empty objects, and what is not an object.
objects = [b'{"id":1}', b' {"id": 2} ', b'\t{\n"id" : 3\r}\x0b\x0c', b"{ }", b"{}", b'{"name":"\xc3\xa9"}']
objects += [b'{"id":4,"name":"b"}', b'{"name":null}', b'{ "name":"c" }', b'{"id":"x"}', b'{"id":1.5}']
not_objects = [b"", b" ", b"[1]", b"{", b"}", b'{"id":', b"\xff{}", b"{}x", b"x{}", b"\x00{}", b"{\xa0}"]
key_texts = st.sampled_from(objects)
actions = st.sampled_from([b"u", b"d"])


def _change_headers(key: bytes, action: bytes, extra: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(b"@key", key), (b"@action", action), *extra]


# A change as the upsert encoder writes it, possibly followed by headers that repeat its names.
well_formed_headers = st.builds(
    _change_headers,
    key_texts,
    actions,
    st.lists(st.tuples(st.sampled_from([b"@key", b"@action", TAG_HEADER]), small_blobs), max_size=2),
)
# Anything: missing, repeated, reordered headers; actions other than u / d; keys that are not objects.
odd_headers = st.lists(
    st.tuples(
        st.sampled_from([b"@key", b"@action", TAG_HEADER, b"", b"\xff"]),
        st.one_of(actions, st.sampled_from([b"U", b"", b"ud"]), key_texts, st.sampled_from(not_objects)),
    ),
    max_size=4,
)
upsert_bodies = st.one_of(st.sampled_from(objects), st.sampled_from(not_objects), small_blobs)


def _records(
    headers: st.SearchStrategy[list[tuple[bytes, bytes]]], body: st.SearchStrategy[bytes]
) -> st.SearchStrategy[list[SequencedRecord]]:
    # Positions Spark can hold (both paths fail on larger ones); seq_nums may repeat or go back.
    record = st.builds(
        SequencedRecord,
        seq_num=st.integers(0, 40),
        body=body,
        headers=headers,
        timestamp=st.integers(0, 2**50),
    )
    return st.lists(record, max_size=10)


changelog = st.one_of(
    _records(well_formed_headers, st.sampled_from(objects)),
    _records(well_formed_headers, upsert_bodies),
    _records(st.one_of(well_formed_headers, odd_headers), upsert_bodies),
)


def _columns(recs: list[SequencedRecord]) -> RecordColumns:
    cols, _ = parse_read_batch(_message(recs, None))
    return cols


def _outcome(build: Callable[[], list[pa.RecordBatch]]) -> tuple[str, object]:
    """The batches built, or the error raised (type and message)."""
    try:
        return "batches", build()
    except (ReadError, ValueError, pa.ArrowException) as exc:
        return "error", (type(exc), str(exc))


def _assert_same(got: tuple[str, object], want: tuple[str, object]) -> None:
    assert got[0] == want[0], (got, want)
    if got[0] == "error":
        assert got == want
        return
    got_batches, want_batches = got[1], want[1]
    assert isinstance(got_batches, list)
    assert isinstance(want_batches, list)
    assert len(got_batches) == len(want_batches)
    for g, w in zip(got_batches, want_batches, strict=True):
        assert g.schema == w.schema
        assert g.equals(w), (g.to_pylist(), w.to_pylist())


@SETTINGS
@given(_records(kafka_headers, bodies))
def test_kafka_columns_equal_the_record_path(recs: list[SequencedRecord]) -> None:
    """kafka from columns: the first @kafka-key header as key (null without), headers without it and
    without every @s2sink tag, in order, names as text (invalid UTF-8 replaced) -- as the record path
    gives, for repeated, binary and empty headers, empty and large bodies, the full schema and a
    projection."""
    cols = _columns(recs)
    for schema in (KAFKA_SCHEMA, KAFKA_PROJECTION):
        _assert_same(
            _outcome(lambda s=schema: [columns_to_batch("kafka", s, [("st", cols)])]),
            _outcome(lambda s=schema: [records_to_batch("kafka", s, "st", recs)]),
        )


@SETTINGS
@given(changelog)
def test_upsert_columns_equal_the_record_path(recs: list[SequencedRecord]) -> None:
    """upsert from columns -- key / action / value text, and a typed schema decoded from the key JSON
    spliced with the value JSON -- equals the record path: same batches, or the same ReadError naming
    the same first bad record (missing header, bad action, key or value not an object, a field that
    does not decode)."""
    cols = _columns(recs)
    for schema in (UPSERT_SCHEMA, UPSERT_PROJECTION, TYPED_UPSERT, TYPED_ACTION_ONLY, TYPED_NESTED):
        _assert_same(
            _outcome(lambda s=schema: [columns_to_batch(rows_kind("upsert", s), s, [("st", cols)])]),
            _outcome(lambda s=schema: [records_to_batch("upsert", s, "st", recs)]),
        )


def _reference_materialized(
    schema: StructType, recs: list[SequencedRecord], rows: int
) -> list[pa.RecordBatch]:
    latest = materialize("st", [r for r in recs if not r.is_command_record()])
    return [
        records_to_batch("upsert", schema, "st", latest[i : i + rows]) for i in range(0, len(latest), rows)
    ]


def _parts(recs: list[SequencedRecord], cuts: list[int]) -> Iterator[RecordColumns]:
    bounds = sorted({0, len(recs), *(c % (len(recs) + 1) for c in cuts)})
    for lo, hi in itertools.pairwise(bounds):
        yield _columns(recs[lo:hi])


@SETTINGS
@given(
    st.one_of(
        _records(well_formed_headers, st.sampled_from(objects)),
        _records(st.one_of(well_formed_headers, odd_headers), upsert_bodies),
    ),
    st.lists(st.integers(0, 10), max_size=3),
    st.integers(1, 4),
)
def test_materialized_upserts_equal_the_record_path(
    recs: list[SequencedRecord], cuts: list[int], rows: int
) -> None:
    """The latest change per key (keys repeating within and across read batches, deletes dropping the
    key, command records skipped), sorted by seq_num and cut into batches of ``rows``, equals what
    `materialize` and the record path give, for text and typed schemas, errors included."""
    for schema in (UPSERT_SCHEMA, TYPED_UPSERT):
        _assert_same(
            _outcome(lambda s=schema: _materialized(s, _parts(recs, cuts), rows)),
            _outcome(lambda s=schema: _reference_materialized(s, recs, rows)),
        )


def test_materialize_keeps_the_last_change_per_key() -> None:
    """A key updated then deleted is gone; a key deleted then updated again, in a later read batch, keeps
    its last update; the survivors come in seq_num order; a command record is no change."""
    fence = SequencedRecord(3, b"f", [(b"", b"fence")], 0)

    def change(seq: int, key: bytes, action: bytes, body: bytes = b"") -> SequencedRecord:
        return SequencedRecord(seq, body, [(b"@key", key), (b"@action", action)], 0)

    first = _columns([change(0, b"a", b"u", b"1"), change(1, b"b", b"u", b"2"), change(2, b"a", b"d"), fence])
    second = _columns([change(4, b"c", b"u", b"3"), change(5, b"a", b"u", b"4"), change(6, b"c", b"d")])
    batches = _materialized(UPSERT_SCHEMA, [first, second])
    assert [(r["seq_num"], r["key"], r["value"]) for b in batches for r in b.to_pylist()] == [
        (1, "b", "2"),
        (5, "a", "4"),
    ]


def test_a_record_without_a_change_fails_naming_it() -> None:
    """A record with no @key header fails the read with ReadError naming its seq_num, the stream and its
    header names; an action other than u / d does too."""
    ok = SequencedRecord(0, b"{}", [(b"@key", b"{}"), (b"@action", b"u")], 0)
    no_key = SequencedRecord(7, b"{}", [(b"@action", b"u"), (b"\xff", b"")], 0)
    with pytest.raises(
        ReadError, match=r"record 7 of stream 'st' has no @key header .*\[b'@action', b'\\xff'\]"
    ):
        columns_to_batch("upsert", UPSERT_SCHEMA, [("st", _columns([ok, no_key]))])
    bad_action = SequencedRecord(8, b"{}", [(b"@key", b"{}"), (b"@action", b"x"), (b"@action", b"u")], 0)
    with pytest.raises(ReadError, match=r"record 8 of stream 'st' has no @key header or no @action header"):
        columns_to_batch("upsert", UPSERT_SCHEMA, [("st", _columns([bad_action]))])


def test_kafka_header_names_that_are_not_utf8_are_replaced() -> None:
    """A header name that is not UTF-8 reads as text with U+FFFD in place of the bad bytes, as Python's
    decode with errors='replace' gives; the other names of the batch are unchanged."""
    rec = SequencedRecord(0, b"v", [(b"ok", b"1"), (b"a\xffb", b"2"), (b"\xed\xa0\x80", b"3")], 0)
    (row,) = columns_to_batch("kafka", KAFKA_SCHEMA, [("st", _columns([rec]))]).to_pylist()
    assert [h["key"] for h in row["headers"]] == ["ok", "a\ufffdb", "\ufffd\ufffd\ufffd"]


@pytest.mark.parametrize(
    ("key", "value", "merged"),
    [
        (b'{"id":1}', b'{"n":2}', b'{"id":1,"n":2}'),
        (b' \t{ "id":1 }\n', b'\r\n{"n" : 2}\x0c', b'{"id":1,"n" : 2}'),
        (b"{}", b'{"n":2}', b'{"n":2}'),
        (b'{"id":1}', b"{ \x0b }", b'{"id":1}'),
        (b"{ }", b"{}", b"{}"),
        (b'{"id":1}', b"[2]", None),
        (b"", b"{}", None),
        (b"{", b"{}", None),
        (b"\xa0{}", b"{}", None),  # a non-ASCII space is not stripped
    ],
)
def test_splice_joins_the_insides_of_two_objects(key: bytes, value: bytes, merged: bytes | None) -> None:
    """Spliced text is ``{`` + key inside + ``,`` + value inside + ``}``, each side stripped of ASCII
    whitespace, without the comma when a side is empty; a side that is not ``{...}`` is flagged."""
    keys = pa.array([b'{"a":0}', key, b'{"b":0}'], type=pa.binary())
    values = pa.array([b'{"c":0}', value, b"{}"], type=pa.binary())
    out, bad = splice_objects(keys, values)
    assert bad.tolist() == [False, merged is None, False]
    assert out.to_pylist() == [b'{"a":0,"c":0}', b"{}" if merged is None else merged, b'{"b":0}']
