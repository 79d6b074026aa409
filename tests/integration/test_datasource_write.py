"""format("s2") writes and write -> read round trips, against the lite server with a real local Spark."""

from __future__ import annotations

import asyncio
import datetime as dt
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType
from s2_sdk import S2, Endpoints, StreamConfig, Timestamping, TimestampingMode

from s2_sink._exactly_once.tags import find_tag
from s2_sink.config import S2Config
from s2_sink.datasource import register
from s2_sink.encoders import InsertEncoder, UpsertEncoder
from s2_sink.writer import S2Writer
from tests.faults._support import read_all, run
from tests.integration._s2read import read_stream
from tests.integration.test_datasource_read import append, bodies, new_basin, opts

pytestmark = [pytest.mark.spark]


@pytest.fixture(scope="module")
def sp(spark: SparkSession) -> SparkSession:
    """The shared Spark session with format("s2") registered."""
    register(spark)
    return spark


@pytest.fixture
def endpoint(lite: Any) -> str:
    """The lite server's endpoint."""
    return str(lite.endpoint)


def same_rows(a: DataFrame, b: DataFrame) -> None:
    """Assert two DataFrames hold the same multiset of rows with the same schema."""
    assert a.schema.simpleString() == b.schema.simpleString()
    assert sorted(map(repr, a.collect())) == sorted(map(repr, b.collect()))


def _table(sp: SparkSession) -> DataFrame:
    rows = [
        (
            i,
            f"name-{i}",
            i * 1.5,
            i % 2 == 0,
            Decimal(f"{i}.25"),
            dt.datetime(2024, 1, 1, 0, 0, i, tzinfo=dt.UTC),
            [i, i + 1],
            "eu" if i % 3 else "us",
        )
        for i in range(12)
    ]
    ddl = (
        "id long, name string, score double, even boolean, price decimal(10,2), at timestamp, "
        "tags array<long>, region string"
    )
    return sp.createDataFrame(rows, ddl)


def test_s2writer_then_format_read_gives_equal_dataframe(sp: SparkSession, endpoint: str) -> None:
    """Rows written by S2Writer (JSON encoder) read back with format("s2") and the table's schema equal the
    original DataFrame, across several column types."""
    basin = new_basin(endpoint, "tbl")
    df = _table(sp)
    cfg = S2Config(basin=basin, stream="tbl", account_endpoint=endpoint, basin_endpoint=endpoint)
    S2Writer(cfg, InsertEncoder(), delivery="at-least-once")(df, 0)

    back = (
        sp.read.format("s2")
        .schema(df.schema)
        .options(**opts(endpoint, basin, **{"s2.stream": "tbl", "s2.format": "json"}))
        .load()
    )
    same_rows(back, df)


def test_format_write_routes_by_template_and_reads_back(sp: SparkSession, endpoint: str) -> None:
    """df.write.format("s2") with a stream template appends each row to its stream; reading the prefix
    returns the same rows, each from the stream its template names."""
    basin = new_basin(endpoint)
    df = _table(sp)
    w = opts(endpoint, basin, **{"s2.stream-column": "events/{region}", "s2.create-streams": "true"})
    df.write.format("s2").options(**w).mode("append").save()

    schema = StructType([*df.schema.fields, StructField("_s2_stream", StringType())])
    r = opts(endpoint, basin, **{"s2.stream-prefix": "events/", "s2.format": "json"})
    back = sp.read.format("s2").schema(schema).options(**r).load()
    assert {(row.region, row._s2_stream) for row in back.collect()} == {
        ("eu", "events/eu"),
        ("us", "events/us"),
    }
    same_rows(back.drop("_s2_stream"), df)


def test_raw_write_keeps_body_headers_and_timestamp(sp: SparkSession, endpoint: str) -> None:
    """s2.format=raw writes the value column as the body, with headers and timestamps; a raw read returns
    them unchanged (the Kafka-shaped headers column round-trips)."""
    basin = new_basin(endpoint, "raw")
    rows = [(f"v{i}".encode(), [(b"h", f"{i}".encode())], 1_700_000_000_000 + i) for i in range(5)]
    df = sp.createDataFrame(rows, "value binary, headers array<struct<key:binary,value:binary>>, ts long")
    w = opts(
        endpoint,
        basin,
        **{
            "s2.stream": "raw",
            "s2.format": "raw",
            "s2.headers-column": "headers",
            "s2.timestamp-column": "ts",
        },
    )
    df.coalesce(1).write.format("s2").options(**w).mode("append").save()

    back = (
        sp.read.format("s2")
        .options(**opts(endpoint, basin, **{"s2.stream": "raw"}))
        .load()
        .selectExpr("body", "headers", "unix_millis(timestamp) AS ms")
        .orderBy("ms")
    )
    got = [
        (
            bytes(r.body),
            [(bytes(h.key), bytes(h.value)) for h in r.headers],
            r.ms,
        )
        for r in back.collect()
    ]
    assert got == rows


def test_upsert_materialization_equals_final_table(sp: SparkSession, endpoint: str) -> None:
    """A changelog written in several batches (inserts, updates, deletes, a re-insert) and read with
    s2.upsert-materialize=true equals the expected final table."""
    basin = new_basin(endpoint, "cdc")
    w = opts(
        endpoint,
        basin,
        **{"s2.stream": "cdc", "s2.format": "upsert", "s2.key-columns": "id", "s2.op-column": "op"},
    )
    ddl = "id long, name string, qty long, op string"
    batches = [
        [(1, "a", 1, "u"), (2, "b", 2, "u"), (3, "c", 3, "u")],
        [(1, "a", 10, "u"), (2, None, None, "d"), (4, "d", 4, "u")],
        [(2, "b2", 20, "u"), (3, None, None, "d"), (5, "e", 5, "u"), (5, None, None, "d")],
    ]
    for rows in batches:
        sp.createDataFrame(rows, ddl).coalesce(1).write.format("s2").options(**w).mode("append").save()

    r = opts(endpoint, basin, **{"s2.stream": "cdc", "s2.format": "upsert", "s2.upsert-materialize": "true"})
    table = sp.read.format("s2").schema("id long, name string, qty long").options(**r).load()
    expected = sp.createDataFrame(
        [(1, "a", 10), (2, "b2", 20), (4, "d", 4)], "id long, name string, qty long"
    )
    same_rows(table, expected)


def test_upsert_written_by_s2writer_materializes(sp: SparkSession, endpoint: str) -> None:
    """Changelog records from S2Writer's UpsertEncoder (the Flink connector layout) materialize too."""
    basin = new_basin(endpoint, "u")
    cfg = S2Config(basin=basin, stream="u", account_endpoint=endpoint, basin_endpoint=endpoint)
    writer = S2Writer(cfg, UpsertEncoder(["k"], op_column="op"), delivery="at-least-once")
    writer(sp.createDataFrame([("x", 1, "u"), ("y", 2, "u")], "k string, v long, op string").coalesce(1), 0)
    writer(
        sp.createDataFrame([("x", None, "d"), ("y", 3, "u")], "k string, v long, op string").coalesce(1), 1
    )

    r = opts(endpoint, basin, **{"s2.stream": "u", "s2.format": "upsert", "s2.upsert-materialize": "true"})
    table = sp.read.format("s2").schema("k string, v long").options(**r).load()
    assert [tuple(row) for row in table.collect()] == [("y", 3)]


def test_stream_to_stream_pipeline(sp: SparkSession, endpoint: str, tmp_path: Path) -> None:
    """readStream.format("s2") -> writeStream.format("s2") copies every record of a stream, across
    micro-batches, in order."""
    basin = new_basin(endpoint, "in", "out")
    append(endpoint, basin, "in", bodies("a", "b", "c"))
    src = sp.readStream.format("s2").options(**opts(endpoint, basin, **{"s2.stream": "in"})).load()
    w = opts(endpoint, basin, **{"s2.stream": "out", "s2.format": "raw", "s2.value-column": "body"})
    q = (
        src.select("body")
        .writeStream.format("s2")
        .options(**w)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        q.processAllAvailable()
        append(endpoint, basin, "in", bodies("d", "e"))
        q.processAllAvailable()
    finally:
        q.stop()
    back = (
        sp.read.format("s2")
        .options(**opts(endpoint, basin, **{"s2.stream": "out"}))
        .load()
        .orderBy("seq_num")
    )
    assert [bytes(r.body) for r in back.collect()] == [b"a", b"b", b"c", b"d", b"e"]


def _copy_query(sp: SparkSession, endpoint: str, basin: str, checkpoint: Path, **extra: str) -> Any:
    """readStream "in" -> writeStream.format("s2") "out" (bodies copied), one micro-batch per trigger."""
    src = sp.readStream.format("s2").options(**opts(endpoint, basin, **{"s2.stream": "in"})).load()
    w = opts(endpoint, basin, **{"s2.stream": "out", "s2.format": "raw", "s2.value-column": "body"}, **extra)
    return (
        src.select("body")
        .writeStream.format("s2")
        .options(**w)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_streaming_progress_shows_the_rows_spark_counts(
    sp: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    """StreamingQueryProgress of a format("s2") write reports the rows Spark wrote to the sink
    (``sink.numOutputRows``); Spark's Python data source API has no hook for a sink's own figures, so
    ``sink.metrics`` stays empty (docs/operations.md, "Figures")."""
    basin = new_basin(endpoint, "in", "out")
    append(endpoint, basin, "in", bodies("a", "b", "c"))
    q = _copy_query(sp, endpoint, basin, tmp_path / "ck", **{"s2.delivery": "at-least-once"})
    try:
        q.processAllAvailable()
        progress = next(p for p in reversed(q.recentProgress) if p["numInputRows"])
    finally:
        q.stop()
    assert progress["sink"]["numOutputRows"] == 3
    assert not progress["sink"].get("metrics")


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_streaming_write_replay_of_a_written_batch(
    sp: SparkSession, endpoint: str, tmp_path: Path, delivery: str
) -> None:
    """Spark loses its commit of micro-batch 1 (its checkpoint's commits/1 is deleted, as when the driver
    dies after the sink's commit) and replays the batch on restart: exactly-once (the default) writes
    nothing twice and the ledger, named after the query id, records the batches; at-least-once appends
    the batch again, so this test tells the two apart."""
    basin = new_basin(endpoint, "in", "out")
    ck = tmp_path / "ck"
    extra = {} if delivery == "exactly-once" else {"s2.delivery": delivery}
    append(endpoint, basin, "in", bodies("a", "b", "c"))
    q = _copy_query(sp, endpoint, basin, ck, **extra)
    try:
        q.processAllAvailable()
        append(endpoint, basin, "in", bodies("d", "e"))
        q.processAllAvailable()
        assert q.lastProgress["batchId"] == 1
    finally:
        q.stop()
    for name in ("1", ".1.crc"):
        (ck / "commits" / name).unlink()
    q2 = _copy_query(sp, endpoint, basin, ck, **extra)
    try:
        q2.processAllAvailable()
    finally:
        q2.stop()
    out = read_stream(endpoint, basin, "out")
    got = sorted(bytes(r.body) for r in out)
    if delivery == "at-least-once":
        assert got == [b"a", b"b", b"c", b"d", b"d", b"e", b"e"]
        return
    assert got == [b"a", b"b", b"c", b"d", b"e"]
    assert all(find_tag(r.headers) is not None for r in out[:1])  # chunks are tagged
    ledger = [orjson.loads(r.body) for r in read_stream(endpoint, basin, f"_s2sink/ledger/{q.id}")]
    states = _ledger_states(ledger)
    # each execution announces its batch, then commits it; the replay of batch 1 writes nothing
    assert [c for k, c, _ in states if k == "commit"] == [0, 1, 1]
    assert {r["scope"] for r in ledger} == {"batch"}


def _ledger_states(ledger: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    """(kind, committed, epoch) of each state record, checked to alternate announcement and commit: an
    ``open`` starts the next epoch, an ``intent`` continues the epoch of the commit before it."""
    states = [(r["kind"], r["committed"], r["epoch"]) for r in ledger if r["kind"] != "ends"]
    assert [k == "commit" for k, _, _ in states] == [i % 2 == 1 for i in range(len(states))]
    epoch = 0
    for kind, _, e in states:
        if kind == "open":
            assert e == epoch + 1
            epoch = e
        assert e == epoch
    assert states[0][0] == "open"
    return states


def test_routed_streaming_write_keeps_one_epoch_across_micro_batches(
    sp: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    """writeStream.format("s2") routed to two streams over five micro-batches writes every row once, and
    the micro-batches the same planning process follows up on continue its epoch (an ``intent``, no
    fence): each routed stream holds one fence record per epoch, fewer than the batches (one per batch
    when every batch opened an epoch)."""
    routed = ("out/eu", "out/us")
    basin = new_basin(endpoint, "in", *routed)
    src = sp.readStream.format("s2").options(**opts(endpoint, basin, **{"s2.stream": "in"})).load()
    w = opts(endpoint, basin, **{"s2.stream-column": "dest", "s2.format": "raw", "s2.value-column": "body"})
    dest = F.concat(F.lit("out/"), F.substring(F.col("body").cast("string"), 1, 2))
    q = (
        src.select("body", dest.alias("dest"))
        .writeStream.format("s2")
        .options(**w)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    sent = []
    try:
        for batch in range(5):
            rows = [f"{'eu' if i % 2 else 'us'}-{batch}-{i}" for i in range(6)]
            append(endpoint, basin, "in", bodies(*rows))
            sent += rows
            q.processAllAvailable()
    finally:
        q.stop()
    got = sorted(bytes(r.body).decode() for s in routed for r in read_stream(endpoint, basin, s))
    assert got == sorted(sent)
    states = _ledger_states(
        [orjson.loads(r.body) for r in read_stream(endpoint, basin, f"_s2sink/ledger/{q.id}")]
    )
    batches = sum(1 for k, _, _ in states if k == "commit")
    epochs = len({e for _, _, e in states})
    fences = {s: _fence_records(endpoint, basin, s) for s in routed}
    print(f"batches={batches} ledger_records={len(states)} epochs={epochs} fences={fences}")
    assert batches >= 5
    assert fences == dict.fromkeys(routed, epochs)
    assert epochs < batches


def _fence_records(endpoint: str, basin: str, stream: str) -> int:
    records = run(read_all(endpoint, basin, stream, commands=True))
    return sum(1 for r in records if r.headers == [(b"", b"fence")])


@pytest.mark.parametrize(
    ("extra", "mode", "message"),
    [
        ({"s2.stream": "s"}, "overwrite", "only appends"),
        ({"s2.stream": "s", "s2.format": "upsert", "s2.key-columns": "nope"}, "append", "'nope'"),
        ({"s2.stream-column": "missing"}, "append", "'missing'"),
    ],
)
def test_bad_write_options_fail_on_the_driver(
    sp: SparkSession, endpoint: str, extra: dict[str, str], mode: str, message: str
) -> None:
    """Invalid writer options fail before any task runs, naming the option or column and the value."""
    df = sp.createDataFrame([(1, "a")], "id long, name string")
    with pytest.raises(Exception, match="ConfigError") as info:
        df.write.format("s2").options(**opts(endpoint, "unused-basin", **extra)).mode(mode).save()
    assert message in str(info.value)


def test_create_streams_keeps_the_config_of_a_stream_that_exists(
    sp: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    """df.write.format("s2") and writeStream.format("s2") with s2.create-streams=true write to a stream made
    with infinite retention and arrival timestamps and leave both as they were (S2's ensure would set them
    to the basin's defaults: s2-lite lite/src/backend/streams.rs, provision_stream)."""
    basin = new_basin(endpoint, "in")
    kept = StreamConfig(retention_policy="infinite", timestamping=Timestamping(mode=TimestampingMode.ARRIVAL))

    async def make() -> None:
        async with S2("test", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
            await s2.basin(basin).create_stream("out", config=kept)

    async def config() -> tuple[Any, Any]:
        async with S2("test", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
            got = await s2.basin(basin).get_stream_config("out")
            return got.retention_policy, got.timestamping.mode if got.timestamping else None

    asyncio.run(make())
    w = opts(endpoint, basin, **{"s2.stream": "out", "s2.create-streams": "true"})
    _table(sp).write.format("s2").options(**w).mode("append").save()
    append(endpoint, basin, "in", bodies("a", "b"))
    q = _copy_query(sp, endpoint, basin, tmp_path / "ck", **{"s2.create-streams": "true"})
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    assert asyncio.run(config()) == ("infinite", TimestampingMode.ARRIVAL)
    assert len(read_stream(endpoint, basin, "out")) == 12 + 2
