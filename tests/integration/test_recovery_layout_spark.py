"""The recovery layout's Python twin agrees with Spark: a task recomputes in Python the partition Spark
put each record in, so it can check its rows are its own and subtract only fingerprints it owns."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from s2_sink._exactly_once.recovery_layout import repartition_for_recovery, spark_xxhash64
from s2_sink._write.driver.routing import STREAM_COLUMN
from s2_sink.encoders._changelog import ACTION_HEADER, KEY_HEADER
from s2_sink.encoders._frame import ACTION, BODY, HEADERS, HEADERS_DDL, KEY, stream_texts

_BODIES = [
    b"",
    b"a",
    b"abc",
    b"abcd",
    b"abcdefg",
    b"abcdefgh",
    b"x" * 31,
    b"y" * 32,
    b"z" * 33,
    bytes(range(200)),
]


def test_python_partition_of_matches_spark_repartition(spark: SparkSession) -> None:
    """Python's partition_of is the partition Spark's replay repartition puts a record in: by the whole
    content, or by stream and @key value when @key is the first header (an upsert change)."""
    variants = [
        lambda i, body: None,
        lambda i, body: [],
        lambda i, body: [(b"@key", b"k%d" % (i % 5)), (b"h", body[:5])],
        lambda i, body: [(b"h", body[:5]), (b"@key", b"k%d" % i)],
    ]
    rows = []
    for i, body in enumerate(_BODIES * 4):
        rows.append((f"stream-{i % 4}-é", body, variants[i % 4](i, body)))
    schema = f"{STREAM_COLUMN} string, {BODY} binary, {HEADERS} {HEADERS_DDL}"
    _check_layouts(spark, rows, schema)


def _check_layouts(spark: SparkSession, rows: Sequence[tuple[str, bytes, object]], schema: str) -> None:
    for columns in ([STREAM_COLUMN, BODY, HEADERS], [BODY, HEADERS], [BODY]):
        frame = spark.createDataFrame(rows, schema).select(*columns)
        laid, layout = repartition_for_recovery(frame, 7)  # enough partitions to tell a wrong mapping
        got = laid.select(
            *columns,
            F.spark_partition_id().alias("pid"),
            F.xxhash64(*columns).alias("xx"),
        ).collect()
        assert len(got) == len(rows)
        assert layout.partitions == 7
        assert layout.routed == (STREAM_COLUMN in columns)
        for r in got:
            stream = r[STREAM_COLUMN] if STREAM_COLUMN in columns else "events"
            headers = (
                [(bytes(h["name"]), bytes(h["value"])) for h in (r[HEADERS] or [])]
                if HEADERS in columns
                else []
            )
            assert spark_xxhash64(stream if layout.routed else None, headers, bytes(r[BODY])) == r["xx"]
            assert layout.partition_of(stream, headers, bytes(r[BODY])) == r["pid"]


def test_flat_changelog_rows_are_placed_by_stream_and_key(spark: SparkSession) -> None:
    """A frame in the changelog's flat form (``_s2_key``, ``_s2_action``, own headers apart) is laid out
    where the list form puts the same records: Python's partition_of of the records, @key first."""
    rows = [
        (
            f"s{i % 3}",
            body,
            b'{"id":%d}' % (i % 6),
            b"ud"[i % 2 : i % 2 + 1],
            [(b"h", body[:3])] if i % 2 else None,
        )
        for i, body in enumerate(_BODIES * 3)
    ]
    schema = f"{STREAM_COLUMN} string, {BODY} binary, {KEY} binary, {ACTION} binary, {HEADERS} {HEADERS_DDL}"
    for columns in ([STREAM_COLUMN, BODY, KEY, ACTION, HEADERS], [BODY, KEY, ACTION]):
        laid, layout = repartition_for_recovery(spark.createDataFrame(rows, schema).select(*columns), 7)
        got = laid.select(*columns, F.spark_partition_id().alias("pid")).collect()
        assert len(got) == len(rows)
        assert len({r["pid"] for r in got}) > 1
        for r in got:
            stream = r[STREAM_COLUMN] if layout.routed else "events"
            own = (
                [(bytes(h["name"]), bytes(h["value"])) for h in (r[HEADERS] or [])]
                if HEADERS in columns
                else []
            )
            headers = [(KEY_HEADER, bytes(r[KEY])), (ACTION_HEADER, bytes(r[ACTION])), *own]
            assert layout.partition_of(stream, headers, bytes(r[BODY])) == r["pid"]


def test_poison_targets_are_placed_where_python_places_them(spark: SparkSession) -> None:
    """Routed rows whose target is no valid stream name (empty, over 512 bytes, NUL, '.', and bytes that
    are not UTF-8, which Spark's cast of binary to string lets through) become dead letters carrying
    their row hash: a task reading the target the way it does (`stream_texts` over the Arrow it gets)
    computes the hash and the partition Spark's replay layout gives them."""
    targets = ["", "x" * 600, "a\0b", ".", "ok"]
    rows = [(targets[i % 5].encode().hex(), b"row-%d" % i) for i in range(40)]
    rows += [(("ff" * (i + 1)) + "41", b"bad-%d" % i) for i in range(5)]
    frame = spark.createDataFrame(rows, "hex string, body binary").select(
        F.unhex("hex").cast("string").alias(STREAM_COLUMN), F.col("body").alias(BODY)
    )
    laid, layout = repartition_for_recovery(frame, 7)
    got = laid.select(
        STREAM_COLUMN, BODY, F.spark_partition_id().alias("pid"), F.xxhash64(STREAM_COLUMN, BODY).alias("xx")
    )
    arrow = got.toArrow().combine_chunks().to_batches()[0]
    texts = stream_texts(arrow.column(STREAM_COLUMN))
    assert sum(1 for t in texts if t is not None and "\udcff" in t) == 5  # not UTF-8, as Spark had them
    assert len(set(arrow.column("pid").to_pylist())) > 1
    for text, body, pid, xx in zip(
        texts, *(arrow.column(c).to_pylist() for c in (BODY, "pid", "xx")), strict=True
    ):
        assert text is not None
        assert spark_xxhash64(text, [], body) == xx
        assert layout.partition_of(text, [], body) == pid
