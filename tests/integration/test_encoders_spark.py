"""The JVM encoding path (``project``) against the Arrow path (``encode_arrow``) and the decoders."""

from __future__ import annotations

import random
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from s2_sink.encoders import (
    ACTION_HEADER,
    BODY,
    ERROR,
    FRAME_COLUMNS,
    HEADERS,
    KEY,
    KEY_HEADER,
    TIMESTAMP,
    Encoder,
    InsertEncoder,
    UpsertEncoder,
    _jvm,
    decode_json,
    decode_upsert,
)
from s2_sink.encoders._change_order import ORDER, order_struct, sort_changes
from s2_sink.encoders._frame import ACTION
from s2_sink.errors import ConfigError
from tests.unit._encoders_strategies import batch_of, normalized, schema_and_rows

pytestmark = pytest.mark.spark

# One row per interesting value of every supported type, plus an all-null row.
EVERY_TYPE_SQL = """
select * from values
  (true, cast(1 as tinyint), cast(-2 as smallint), 3, 9223372036854775807L, cast(1.1 as float), 1.0E10D,
   cast(12.5 as decimal(5,2)), cast(0 as decimal(20,10)), 'é"\\\\\n\u0001 x', X'00FF10', date'0001-01-01',
   timestamp'2024-01-02 03:04:05.123456', timestamp_ntz'2024-01-02 03:04:05',
   interval '1 02:03:04.000005' day to second, interval '26' hour, array(1, null), map('k', 1, 'j', null),
   map(1, 'a'), named_struct('a', null, 'b', array(named_struct('c', 1.5D))), null),
  (false, null, null, null, null, cast('NaN' as float), cast('-Infinity' as double), null,
   cast(0.00000001 as decimal(20,10)), '', X'', null, null, null, null, null, array(), map(), null, null,
   null),
  (null, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null, null,
   null, null, null)
  as t(b, i8, i16, i32, i64, f32, f64, dec, dec_small, s, bin, d, ts, ntz, dti, hi, arr, m, mi, st, nul)
"""


def arrow_frame(encoder: Encoder, df: DataFrame, **kwargs: Any) -> pa.Table:
    """The record frame encode_arrow computes for every row of ``df``."""
    table = df.toArrow()
    batches = [
        encoder.encode_arrow(b, schema=df.schema, errors="column", **kwargs) for b in table.to_batches()
    ]
    return pa.Table.from_batches(batches) if batches else pa.table({})


def jvm_rows(frame: DataFrame) -> list[dict[str, Any]]:
    """A projected frame as plain dicts (Spark Rows turned into dicts, recursively)."""
    return [r.asDict(recursive=True) for r in frame.collect()]


def all_nullable(t: DataType) -> DataType:
    """``t`` with every nested field, element and value nullable (as Python data arrives in practice)."""
    if isinstance(t, StructType):
        return StructType([StructField(f.name, all_nullable(f.dataType), True) for f in t.fields])
    if isinstance(t, ArrayType):
        return ArrayType(all_nullable(t.elementType), True)
    if isinstance(t, MapType):
        return MapType(t.keyType, all_nullable(t.valueType), True)
    return t


def every_type_df(spark: SparkSession) -> DataFrame:
    """EVERY_TYPE_SQL's rows in one partition (nested fields nullable: toArrow refuses SQL literals'
    non-nullable nested fields next to null parents)."""
    df = spark.sql(EVERY_TYPE_SQL)
    schema = all_nullable(df.schema)
    assert isinstance(schema, StructType)
    return spark.createDataFrame(df.collect(), schema).coalesce(1)


@pytest.fixture(scope="module")
def every_type(spark: SparkSession) -> DataFrame:
    """A DataFrame with a column of every supported type (see EVERY_TYPE_SQL)."""
    return every_type_df(spark)


def test_jvm_and_arrow_bodies_are_byte_identical_for_every_type(every_type: DataFrame) -> None:
    """to_json with the pinned options and the Arrow encoder write the same bytes for every type."""
    jvm = [r[BODY] for r in every_type.transform(InsertEncoder().project).collect()]
    py = arrow_frame(InsertEncoder(), every_type).column(BODY).to_pylist()
    assert [bytes(b) for b in jvm] == py


def test_jvm_bodies_decode_to_the_original_values(every_type: DataFrame) -> None:
    """decode_json turns the JVM's bodies back into exactly the rows Spark sends through Arrow."""
    bodies = [bytes(r[BODY]) for r in InsertEncoder().project(every_type).collect()]
    decoded = decode_json(bodies, every_type.schema)
    assert normalized(decoded.to_pylist()) == normalized(every_type.toArrow().to_pylist())


def test_output_does_not_depend_on_the_session_time_zone(spark: SparkSession, every_type: DataFrame) -> None:
    """Timestamps are written in UTC with an offset whatever spark.sql.session.timeZone says."""
    before = [r[BODY] for r in InsertEncoder().project(every_type).collect()]
    previous = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        after = [r[BODY] for r in InsertEncoder().project(every_type).collect()]
    finally:
        spark.conf.set("spark.sql.session.timeZone", previous or "UTC")
    assert after == before
    assert b'"ts":"2024-01-02T03:04:05.123456Z"' in before[0]


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=schema_and_rows(max_rows=4))
def test_random_schemas_encode_identically_on_both_paths(spark: SparkSession, case: Any) -> None:
    """For arbitrary schemas and values, project() and encode_arrow() write byte-identical bodies (bodies
    with floating-point numbers: equal values, as JDK 17 sometimes prints non-shortest digits)."""
    schema, rows = case
    # Spark resolves column names case-insensitively: to it, columns 'I' and 'i' are one ambiguous column.
    assume(len({name.lower() for name in schema.fieldNames()}) == len(schema.fields))
    try:
        df = spark.createDataFrame(pa.Table.from_batches([batch_of(schema, rows)]), schema).coalesce(1)
    except (PySparkException, pa.ArrowException, TypeError, ValueError):  # a case Spark cannot take
        assume(False)
    jvm = [bytes(r[BODY]) for r in InsertEncoder().project(df).collect()]
    py = arrow_frame(InsertEncoder(), df).column(BODY).to_pylist() if rows else []
    if jvm != py:  # JDK < 19 prints some floats/doubles with more digits than the shortest form
        assert any(t in schema.simpleString() for t in ("float", "double"))
        assert normalized(decode_json(jvm, schema).to_pylist()) == normalized(
            decode_json(py, schema).to_pylist()
        )


def test_integer_keys_are_spelled_as_to_json_spells_them(spark: SparkSession) -> None:
    """An upsert key of integer columns is written without to_json, byte for byte as to_json writes it:
    extremes, zero, nulls, and names that JSON escapes."""
    df = spark.sql(
        """select * from values
          (cast(-128 as tinyint), cast(32767 as smallint), -2147483648, -9223372036854775808L, 'x'),
          (cast(127 as tinyint), cast(-32768 as smallint), 0, 9223372036854775807L, null),
          (null, null, null, null, 'y')
          as t(a, b, c, d, s)"""
    ).toDF('i"8', "é\\16", "i\n32", "i64", "s")
    for keys in (["i64"], ['i"8', "é\\16", "i\n32", "i64"], ["i64", "s"]):
        spelled = [r[0] for r in df.select(_jvm.json_key(df.schema, keys)).collect()]
        assert spelled == [r[0] for r in df.select(_jvm.json_body(keys)).collect()]
    spelled = df.select(_jvm.json_key(df.schema, ['i"8', "i64"]).cast("string")).first()
    assert spelled is not None
    assert spelled[0] == '{"i\\"8":-128,"i64":-9223372036854775808}'


def test_columns_differing_only_in_case_are_named_in_a_config_error(spark: SparkSession) -> None:
    """Spark cannot tell 'Id' from 'id' unless spark.sql.caseSensitive is on: the error says which columns
    and what to do, rather than Spark's ambiguous reference; columns the projection does not name are no
    error; with the setting on, both are encoded."""
    df = spark.createDataFrame([(1, 2, "x")], "id long, Id long, v string")
    with pytest.raises(ConfigError, match=r"columns 'id' and 'Id' differ only in case.*rename one of them"):
        InsertEncoder().project(df)
    with pytest.raises(ConfigError, match=r"columns 'id' and 'Id' differ only in case"):
        InsertEncoder(exclude_columns=["Id"]).project(df)  # 'id' is still named, and ambiguous
    [row] = InsertEncoder(exclude_columns=["id", "Id"]).project(df).collect()  # neither is named
    assert bytes(row[BODY]) == b'{"v":"x"}'
    spark.conf.set("spark.sql.caseSensitive", "true")
    try:
        [row] = InsertEncoder().project(df).collect()
    finally:
        spark.conf.unset("spark.sql.caseSensitive")
    assert bytes(row[BODY]) == b'{"id":1,"Id":2,"v":"x"}'


def test_whole_frames_match_with_headers_timestamp_and_key(spark: SparkSession) -> None:
    """Headers, timestamps, keys and errors agree between the JVM and the Arrow paths."""
    df = spark.sql(
        """select * from values
          (1, 'a', array(named_struct('key', 'trace', 'value', X'01')),
           timestamp'2024-01-01 00:00:00.001999'),
          (2, null, null, null),
          (3, 'c', array(named_struct('key', '', 'value', X'')), timestamp'1969-12-31 23:59:59.9995')
          as t(id, k, h, ts)"""
    ).coalesce(1)
    enc = InsertEncoder(key_column="k", headers_column="h", timestamp_column="ts")
    jvm = jvm_rows(enc.project(df, keep=["id"]))
    py = arrow_frame(enc, df, keep=["id"]).to_pylist()
    assert jvm == py
    assert [r[TIMESTAMP] for r in jvm] == [1704067200001, None, -1]
    assert jvm[2][ERROR].startswith("headers column 'h' has an entry with a null or empty key")
    assert list(py[0]) == [*FRAME_COLUMNS, "id"]


def test_raw_format_matches(spark: SparkSession) -> None:
    """format="raw" writes the value bytes as is with the key, identically on both paths."""
    df = spark.sql("select * from values ('k', 'v1'), (null, 'v2'), ('k3', null) as t(key, value)").coalesce(
        1
    )
    enc = InsertEncoder("raw", key_column="key")
    jvm = jvm_rows(enc.project(df))
    assert jvm == arrow_frame(enc, df).to_pylist()
    assert [(r[KEY], r[BODY], r[ERROR]) for r in jvm] == [
        (b"k", b"v1", None),
        (None, b"v2", None),
        (b"k3", b"", "value column 'value' is null"),
    ]


def test_golden_flink_record_from_spark(spark: SparkSession) -> None:
    """A row index="265", content=4 becomes the connector README's record in the JVM path too."""
    df = spark.createDataFrame([("265", 4)], "index string, content int")
    [row] = jvm_rows(UpsertEncoder(["index"]).project(df))
    assert row[HEADERS] == [
        {"name": b"@key", "value": b'{"index":"265"}'},
        {"name": b"@action", "value": b"u"},
    ]
    assert row[BODY] == b'{"content":4}'
    assert row[KEY] == b'{"index":"265"}'


OPS = [
    "insert",
    "update_preimage",
    "update_postimage",
    "delete",
    "+I",
    "+U",
    "-U",
    "-D",
    "u",
    "d",
    "UPSERT",
    None,
]


def test_op_mapping_and_errors_match_the_arrow_path(spark: SparkSession) -> None:
    """Every op value maps (or fails) the same way in the JVM as in Python; pre-images disappear."""
    df = spark.createDataFrame(
        [(i, f"v{i}", op) for i, op in enumerate(OPS)] + [(None, "nk", "+I")], "id int, v string, op string"
    ).coalesce(1)
    enc = UpsertEncoder(["id"], op_column="op")
    jvm = jvm_rows(enc.project(df))
    assert jvm == arrow_frame(enc, df).to_pylist()
    actions = [(r[KEY], r[HEADERS][1]["value"], r[ERROR]) for r in jvm]
    assert actions == [
        (b'{"id":0}', b"u", None),
        (b'{"id":2}', b"u", None),
        (b'{"id":3}', b"d", None),
        (b'{"id":4}', b"u", None),
        (b'{"id":5}', b"u", None),
        (b'{"id":7}', b"d", None),
        (b'{"id":8}', b"u", None),
        (b'{"id":9}', b"d", None),
        (
            b'{"id":10}',
            b"",
            "op column 'op' has unknown value 'UPSERT' (expected insert, update_postimage, "
            "update_preimage, delete, +I, +U, -U, -D, u or d)",
        ),
        (b'{"id":11}', b"", "op column 'op' is null"),
        (b'{"id":null}', b"u", "upsert key column 'id' is null"),
    ]


def test_compaction_keeps_last_change_per_key_in_input_order(spark: SparkSession) -> None:
    """compact=True keeps each key's last change in the micro-batch; the survivors of one input partition
    stay together, in input order."""
    changes = [
        ("a", 1, "+I"),
        ("b", 1, "+I"),
        ("a", 2, "+U"),
        ("c", 1, "+I"),
        ("b", 0, "-D"),
        ("d", 1, "+I"),
        ("a", 3, "+U"),
        ("e", 1, "+I"),
        ("d", 2, "+U"),
        ("f", 1, "-U"),
    ]
    df = spark.createDataFrame(changes, "k string, v int, op string")  # local[2]: two slices of five rows
    inputs = [[r.k for r in p] for p in df.rdd.glom().collect()]
    assert inputs == [["a", "b", "a", "c", "b"], ["d", "a", "e", "d", "f"]]
    frame = UpsertEncoder(["k"], op_column="op", compact=True).project(df)
    outputs = [
        [(bytes(r[KEY]).decode(), bytes(r[BODY]).decode()) for r in p] for p in frame.rdd.glom().collect()
    ]
    # "a" of partition 0 is superseded by "a" of partition 1; the -U row is dropped before compaction
    groups = [
        [('{"k":"c"}', '{"v":1}'), ('{"k":"b"}', "")],
        [('{"k":"a"}', '{"v":3}'), ('{"k":"e"}', '{"v":1}'), ('{"k":"d"}', '{"v":2}')],
    ]
    assert sorted(r for p in outputs for r in p) == sorted(r for g in groups for r in g)
    for group in groups:
        [holder] = [p for p in outputs if group[0] in p]
        start = holder.index(group[0])
        assert holder[start : start + len(group)] == group


def test_upsert_frames_decode_back(spark: SparkSession, every_type: DataFrame) -> None:
    """Upsert records built by Spark decode to the key and value columns of the source rows."""
    df = every_type.filter(F.col("b").isNotNull())
    frame = jvm_rows(UpsertEncoder(["b", "s"]).project(df))
    changes = decode_upsert(
        [([(h["name"], h["value"]) for h in r[HEADERS]], bytes(r[BODY])) for r in frame], schema=df.schema
    )
    source = df.toArrow().to_pylist()
    assert [normalized(c.key) for c in changes] == [normalized({"b": r["b"], "s": r["s"]}) for r in source]
    assert [normalized(c.value) for c in changes] == [
        normalized({k: v for k, v in r.items() if k not in ("b", "s")}) for r in source
    ]


def test_oversize_messages_match(spark: SparkSession) -> None:
    """The JVM names size and key of an over-1-MiB record with the same text as the Arrow path."""
    df = spark.createDataFrame([("big", "x" * (1 << 20))], "id string, v string")
    enc = UpsertEncoder(["id"])
    [row] = jvm_rows(enc.project(df))
    assert row[ERROR] == arrow_frame(enc, df).column(ERROR)[0].as_py()
    assert row[ERROR] == (
        'record of 1048620 metered bytes exceeds S2\'s 1 MiB (1048576 bytes) record limit (key {"id":"big"})'
    )


def _headers(row: dict[str, Any]) -> tuple[tuple[bytes, bytes], ...]:
    """A frame row's record headers, the changelog's flat form (``_s2_action``) included."""
    own = tuple((bytes(h["name"]), bytes(h["value"])) for h in row.get(HEADERS) or ())
    if ACTION not in row:
        return own
    return ((KEY_HEADER, bytes(row[KEY])), (ACTION_HEADER, bytes(row[ACTION])), *own)


def _changes_per_key(
    rows: list[dict[str, Any]],
) -> dict[bytes, list[tuple[tuple[tuple[bytes, bytes], ...], bytes]]]:
    """Each key's (headers, body) records in row order, errors left out."""
    out: dict[bytes, list[tuple[tuple[tuple[bytes, bytes], ...], bytes]]] = {}
    for r in rows:
        if r[ERROR] is None:
            out.setdefault(bytes(r[KEY]), []).append((_headers(r), bytes(r[BODY])))
    return out


@pytest.mark.parametrize(
    "encoder",
    [
        UpsertEncoder(["k"]),
        UpsertEncoder(["k", "v"], op_column="op", headers_column="h", timestamp_column="t"),
        UpsertEncoder(["k"], op_column="op", headers_column="h", order_by="t", compact=True),
    ],
    ids=["plain", "op-headers-timestamp", "compact-order_by"],
)
def test_flat_changelog_projection_is_the_list_form(spark: SparkSession, encoder: UpsertEncoder) -> None:
    """``project(flat_changelog=True)`` (what S2Writer ships) holds, row for row, the records of the list
    form: @key = _s2_key, @action = _s2_action, then the row's own headers; same bodies, timestamps, keys
    and errors (an unknown op's empty action and a null key included)."""
    header = "array<struct<key:string,value:binary>>"
    rows = [
        (
            None if i == 5 else f"k{i % 4}",
            i % 3,
            ["u", "d", "+I", "-U", "?", None][i % 6],
            i,
            [("h", bytes([i % 3]))] if i % 2 else None,
        )
        for i in range(24)
    ]
    df = spark.createDataFrame(rows, f"k string, v int, op string, t long, h {header}").coalesce(1)
    listed = jvm_rows(encoder.project(df))
    flat = jvm_rows(encoder.project(df, flat_changelog=True))
    assert all(ACTION in r for r in flat)

    def records(frame: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
        return sorted(
            (_headers(r), bytes(r[BODY]), r[TIMESTAMP], bytes(r[KEY]), r[ERROR] or "") for r in frame
        )

    assert records(flat) == records(listed)
    assert len(listed) > 8


@pytest.mark.parametrize("flat", [False, True])
@pytest.mark.parametrize("compact", [False, True])
def test_change_order_and_its_ties_match_the_arrow_path_for_any_split(
    spark: SparkSession, compact: bool, flat: bool
) -> None:
    """With order_by, Spark's layout (rows of a key in one partition, sorted by order_by then the record's
    bytes) gives each key the records encode_arrow gives it, for three different splits of the same rows —
    ties on pos included, some broken only by the user headers; with compact=True, the same survivor; and
    so does the changelog's flat form (what S2Writer ships)."""
    header = "array<struct<key:string,value:binary>>"
    rows = [
        (
            f"k{i % 3}",
            i % 2,
            "d" if i % 7 == 0 else "u",
            i % 4,
            [("h", bytes([(i // 3) % 3]))] if i % 5 else None,
        )
        for i in range(40)
    ]
    schema = f"k string, v int, op string, pos int, h {header}"
    enc = UpsertEncoder(["k"], op_column="op", order_by="pos", compact=compact, headers_column="h")
    expected = _changes_per_key(arrow_frame(enc, spark.createDataFrame(rows, schema).coalesce(1)).to_pylist())
    assert any(len(v) > 1 for v in expected.values()) or compact
    for seed in (1, 2, 3):
        shuffled = list(rows)
        random.Random(seed).shuffle(shuffled)
        df = spark.createDataFrame(spark.sparkContext.parallelize(shuffled, seed + 1), schema)
        frame = enc.project(df, keep=["pos"], flat_changelog=flat).withColumn(ORDER, order_struct(["pos"]))
        laid = sort_changes(frame.repartition(KEY))
        assert _changes_per_key(jvm_rows(laid)) == expected


def test_compaction_keeps_a_keys_last_good_change_when_its_last_change_is_bad(spark: SparkSession) -> None:
    """compact=True with order_by: key k0's last change by pos is a bad row (an unknown change kind). It is
    kept (it becomes a dead letter) and does not push out k0's last good change: on both paths the survivor
    is the change at pos 2, as the uncompacted table would end, and the bad row is there once."""
    rows = [("k0", 1, "u", 1), ("k0", 2, "u", 2), ("k0", 3, "x", 3), ("k1", 4, "u", 1)]
    df = spark.createDataFrame(rows, "k string, v int, op string, pos int").coalesce(1)
    enc = UpsertEncoder(["k"], op_column="op", order_by="pos", compact=True)

    def summary(records: list[dict[str, Any]]) -> tuple[list[bytes], int]:
        good = sorted(bytes(r[BODY]) for r in records if r[ERROR] is None)
        return good, sum(r[ERROR] is not None for r in records)

    jvm = summary(jvm_rows(enc.project(df)))
    arrow = summary(arrow_frame(enc, df).to_pylist())
    assert jvm == arrow
    good, bad = jvm
    assert bad == 1
    assert len(good) == 2  # k0's change at pos 2 and k1's only change
    assert any(b'"v":2' in body for body in good)
