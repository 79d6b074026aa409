"""The recovery layout and Spark agree by construction: the placement key a record's encoding stage ships is
one Spark's ``repartition(n, key)`` puts in exactly the partition the task's ownership check computes, so a
task's rows are its own and it subtracts only fingerprints it owns."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._write.driver.routing import STREAM_COLUMN
from s2_sink._write.frame_encoding import PLACE
from s2_sink.encoders._changelog import ACTION_HEADER, KEY_HEADER
from s2_sink.encoders._frame import ACTION, BODY, HEADERS, HEADERS_ARROW_TYPE, HEADERS_DDL, KEY, stream_texts

pytestmark = pytest.mark.spark

_BODIES = [b"", b"a", b"abcd", b"abcdefgh", b"x" * 31, b"y" * 32, bytes(range(200))]


@pytest.mark.parametrize("partitions", [1, 2, 7, 64])
def test_placement_keys_land_in_their_partition(spark: SparkSession, partitions: int) -> None:
    """Every placement key Spark found for a partition count is put in its own partition by
    ``repartition(n, key)``, the repartition the writer runs (adaptive execution on or off)."""
    layout = RecoveryLayout.of(spark, partitions, routed=False)
    assert len(layout.keys) == partitions
    rows = [(p, key) for p, key in enumerate(layout.keys)]
    for adaptive in ("true", "false"):
        spark.conf.set("spark.sql.adaptive.enabled", adaptive)
        try:
            laid = spark.createDataFrame(rows * 3, "p int, k long").repartition(partitions, F.col("k"))
            got = laid.select("p", F.spark_partition_id().alias("pid")).collect()
        finally:
            spark.conf.unset("spark.sql.adaptive.enabled")
        assert all(r["p"] == r["pid"] for r in got)


def _headers(i: int, body: bytes) -> list[tuple[bytes, bytes]] | None:
    return [
        None,
        [],
        [(KEY_HEADER, b"k%d" % (i % 5)), (b"h", body[:5])],
        [(b"h", body[:5]), (KEY_HEADER, b"k")],
    ][i % 4]


@pytest.mark.parametrize("routed", [True, False])
def test_records_are_laid_out_where_the_task_check_places_them(spark: SparkSession, routed: bool) -> None:
    """A frame's records, shipped with their placement keys and repartitioned by Spark, each sit in the
    partition `partition_of` names: by the whole content, or by stream and @key value when @key is the
    first header (an upsert change); spread over several partitions."""
    layout = RecoveryLayout.of(spark, 7, routed=routed)
    records = [(f"stream-{i % 4}-é", body, _headers(i, body)) for i, body in enumerate(_BODIES * 4)]
    frame = pa.RecordBatch.from_pydict(
        {
            BODY: pa.array([b for _, b, _ in records], pa.binary()),
            HEADERS: pa.array(
                [None if h is None else [{"name": n, "value": v} for n, v in h] for _, _, h in records],
                HEADERS_ARROW_TYPE,
            ),
            STREAM_COLUMN: pa.array([s for s, _, _ in records]),
        }
    )
    placed = frame.append_column(PLACE, layout.placement(frame))
    ddl = f"{BODY} binary, {HEADERS} {HEADERS_DDL}, {STREAM_COLUMN} string, {PLACE} long"
    got = (
        spark.createDataFrame(placed.to_pylist(), ddl)
        .repartition(7, F.col(PLACE))
        .select(STREAM_COLUMN, BODY, HEADERS, F.spark_partition_id().alias("pid"))
        .collect()
    )
    assert len(got) == len(records)
    assert len({r["pid"] for r in got}) > 1
    for r in got:
        headers = [(bytes(h["name"]), bytes(h["value"])) for h in (r[HEADERS] or [])]
        assert layout.partition_of(r[STREAM_COLUMN], headers, bytes(r[BODY])) == r["pid"]


def test_flat_changelog_rows_are_placed_by_stream_and_key(spark: SparkSession) -> None:
    """A frame in the changelog's flat form (``_s2_key``, ``_s2_action``, own headers apart) is laid out
    where the list form puts the same records: `partition_of` of the records, @key first."""
    layout = RecoveryLayout.of(spark, 7, routed=True)
    n = len(_BODIES) * 3
    frame = pa.RecordBatch.from_pydict(
        {
            BODY: pa.array((_BODIES * 3), pa.binary()),
            KEY: pa.array([b'{"id":%d}' % (i % 6) for i in range(n)], pa.binary()),
            ACTION: pa.array([b"ud"[i % 2 : i % 2 + 1] for i in range(n)], pa.binary()),
            STREAM_COLUMN: pa.array([f"s{i % 3}" for i in range(n)]),
        }
    )
    placed = frame.append_column(PLACE, layout.placement(frame))
    ddl = f"{BODY} binary, {KEY} binary, {ACTION} binary, {STREAM_COLUMN} string, {PLACE} long"
    got = (
        spark.createDataFrame(placed.to_pylist(), ddl)
        .repartition(7, F.col(PLACE))
        .select(STREAM_COLUMN, BODY, KEY, ACTION, F.spark_partition_id().alias("pid"))
        .collect()
    )
    assert len({r["pid"] for r in got}) > 1
    for r in got:
        headers = [(KEY_HEADER, bytes(r[KEY])), (ACTION_HEADER, bytes(r[ACTION]))]
        assert layout.partition_of(r[STREAM_COLUMN], headers, bytes(r[BODY])) == r["pid"]


def test_poison_targets_are_placed_where_python_places_them(spark: SparkSession) -> None:
    """Routed rows whose target is no valid stream name (empty, over 512 bytes, NUL, '.', and bytes that
    are not UTF-8, which Spark's cast of binary to string lets through) become dead letters: the placement
    key a task computes from the Arrow it gets lays each out in the partition the replay's check
    (`partition_of`, over the target as `stream_texts` reads it) names."""
    layout = RecoveryLayout.of(spark, 7, routed=True)
    targets = ["", "x" * 600, "a\0b", ".", "ok"]
    rows = [(targets[i % 5].encode().hex(), b"row-%d" % i) for i in range(40)]
    rows += [(("ff" * (i + 1)) + "41", b"bad-%d" % i) for i in range(5)]
    frame = spark.createDataFrame(rows, "hex string, body binary").select(
        F.unhex("hex").cast("string").alias(STREAM_COLUMN), F.col("body").alias(BODY)
    )
    arrow = frame.toArrow().combine_chunks().to_batches()[0]
    texts = stream_texts(arrow.column(STREAM_COLUMN))
    assert sum(1 for t in texts if t is not None and "\udcff" in t) == 5  # not UTF-8, as Spark had them
    bodies = arrow.column(BODY).to_pylist()
    placed = list(zip(bodies, layout.placement(arrow).to_pylist(), strict=True))
    laid = (
        spark.createDataFrame(placed, f"{BODY} binary, {PLACE} long")
        .repartition(7, F.col(PLACE))
        .select(BODY, F.spark_partition_id().alias("pid"))
        .collect()
    )
    pid_of = {bytes(r[BODY]): r["pid"] for r in laid}
    assert len(set(pid_of.values())) > 1
    for text, body in zip(texts, bodies, strict=True):
        assert text is not None
        assert layout.partition_of(text, [], body) == pid_of[body]
