"""S2Writer end to end on classic local Spark against the lite server."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from s2_sdk import S2, Endpoints, StreamConfig, Timestamping, TimestampingMode

from s2_sink import S2Config, S2Writer
from s2_sink._write.driver.metrics import BatchMetrics
from s2_sink.encoders import InsertEncoder, UpsertEncoder
from s2_sink.errors import ConfigError, EncodeError, PreflightError, WriteError
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests import s2_target
from tests.integration._eo_batches import new_driver_process
from tests.integration._s2read import list_streams, read_stream

pytestmark = pytest.mark.spark


def cfg_for(lite: LiteServer, basin: str, stream: str | None = "events", **kw: Any) -> S2Config:
    """A config for the session's lite server (or the S2 the suite runs against)."""
    account, basin_endpoint = s2_target.endpoints(lite)
    return S2Config(
        basin=basin,
        stream=stream,
        access_token=s2_target.token(lite),
        account_endpoint=account,
        basin_endpoint=basin_endpoint,
        **kw,
    )


def rows_df(spark: SparkSession, n: int, partitions: int = 2) -> DataFrame:
    """n rows (id, region, amount, name) spread over `partitions` partitions."""
    return (
        spark.range(n, numPartitions=partitions)
        .withColumn(
            "region",
            F.element_at(F.array(F.lit("eu"), F.lit("us"), F.lit("ap")), (F.col("id") % 3 + 1).cast("int")),
        )
        .withColumn("amount", F.col("id") * 10)
        .withColumn("name", F.concat(F.lit("n"), F.col("id").cast("string")))
    )


def bodies(lite: LiteServer, basin: str, stream: str) -> list[dict[str, Any]]:
    """The JSON bodies of a stream, in stream order."""
    return [orjson.loads(r.body) for r in read_stream(lite, basin, stream)]


def run_stream(spark: SparkSession, batches: list[DataFrame], writer: S2Writer, tmp_path: Path) -> None:
    """Write each DataFrame as one parquet file and stream them through `writer`, one file per micro-batch."""
    src = tmp_path / "src"
    src.mkdir()
    for i, df in enumerate(batches):
        df.coalesce(1).write.parquet(str(tmp_path / f"stage{i}"))
        (next((tmp_path / f"stage{i}").glob("*.parquet"))).rename(src / f"part-{i:04d}.parquet")
    query = (
        spark.readStream.schema(batches[0].schema)
        .option("maxFilesPerTrigger", 1)
        .parquet(str(src))
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(240)
    assert query.exception() is None


def test_streaming_query_insert_encoder(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """A file-source streaming query writes every row once per micro-batch, with per-batch metrics."""
    seen: list[BatchMetrics] = []
    writer = S2Writer(cfg_for(lite, basin), InsertEncoder(), delivery="at-least-once", on_metrics=seen.append)
    run_stream(
        spark,
        [rows_df(spark, 100).withColumn("id", F.col("id") + i * 100) for i in range(3)],
        writer,
        tmp_path,
    )
    got = bodies(lite, basin, "events")
    assert sorted(b["id"] for b in got) == list(range(300))
    assert got[0].keys() == {"id", "region", "amount", "name"}
    assert [m.rows_in for m in writer.history] == [100, 100, 100]
    assert seen == list(writer.history)
    last = writer.last_metrics
    assert last is not None
    assert last.records == 100
    assert last.streams == ("events",)
    assert last.ack_latency_p50_ms is not None
    assert last.ack_latency_p99_ms is not None


def test_streaming_query_upsert_encoder(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """UpsertEncoder records carry @key and @action headers and the non-key columns as body."""
    writer = S2Writer(cfg_for(lite, basin), UpsertEncoder(key_columns=["id"]), delivery="at-least-once")
    run_stream(
        spark, [rows_df(spark, 25), rows_df(spark, 25).withColumn("amount", F.lit(-1))], writer, tmp_path
    )
    records = read_stream(lite, basin, "events")
    assert len(records) == 50
    first = records[0]
    names = [h[0] for h in first.headers]
    assert names[:2] == [b"@key", b"@action"]
    assert dict(first.headers)[b"@action"] == b"u"
    assert "id" not in orjson.loads(first.body)
    assert [orjson.loads(r.body)["amount"] for r in records[25:]] == [-1] * 25
    assert len(writer.history) == 2


def test_route_by_stream_column(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """stream_column sends each row to the stream it names and keeps that column out of the body."""
    df = rows_df(spark, 90).withColumn("target", F.concat(F.lit("by-col/"), F.col("region")))
    writer = S2Writer(cfg_for(lite, basin, stream=None), stream_column="target", delivery="at-least-once")
    writer(df, 0)
    for region in ("eu", "us", "ap"):
        got = bodies(lite, basin, f"by-col/{region}")
        assert len(got) == 30
        assert {b["region"] for b in got} == {region}
        assert "target" not in got[0]
    assert writer.last_metrics is not None
    assert len(writer.last_metrics.streams) == 3


def test_route_by_template(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """A template like 'tpl/{region}' routes by column values; template columns stay in the body."""
    writer = S2Writer(
        cfg_for(lite, basin, stream=None), stream_column="tpl/{region}", delivery="at-least-once"
    )
    writer(rows_df(spark, 60), 0)
    assert sorted(list_streams(lite, basin, "tpl/")) == ["tpl/ap", "tpl/eu", "tpl/us"]
    assert {b["region"] for b in bodies(lite, basin, "tpl/eu")} == {"eu"}


def test_shards_by_key_hash_are_stable(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """shards=N spreads keys over events/0..N-1; a key always lands on the same shard."""
    cfg = cfg_for(lite, basin, stream="sh")
    enc = UpsertEncoder(key_columns=["id"])
    writer = S2Writer(cfg, enc, shards=4, delivery="at-least-once", create_streams=True)
    writer(rows_df(spark, 200), 0)
    writer(rows_df(spark, 200), 1)
    assert sorted(list_streams(lite, basin, "sh/")) == [f"sh/{i}" for i in range(4)]
    placement: dict[bytes, set[str]] = {}
    total = 0
    for i in range(4):
        for r in read_stream(lite, basin, f"sh/{i}"):
            placement.setdefault(dict(r.headers)[b"@key"], set()).add(f"sh/{i}")
            total += 1
    assert total == 400
    assert len(placement) == 200
    assert all(len(s) == 1 for s in placement.values())


def test_partition_by_key_keeps_per_key_order(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """partition_by_key=True writes each key from one task, so its records keep their batch order."""
    df = spark.range(600, numPartitions=3).select((F.col("id") % 5).alias("k"), F.col("id").alias("seq"))
    writer = S2Writer(
        cfg_for(lite, basin), InsertEncoder(key_column="k"), partition_by_key=True, delivery="at-least-once"
    )
    writer(df.orderBy("seq").coalesce(1), 0)
    got = bodies(lite, basin, "events")
    assert len(got) == 600
    for k in range(5):
        seqs = [b["seq"] for b in got if b["k"] == k]
        assert seqs == sorted(seqs)


def test_bad_rows_go_to_the_dead_letter_stream(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """on_error='dlq': rows without a target go to the DLQ with the original row and the error, counted."""
    df = rows_df(spark, 30).withColumn("target", F.when(F.col("id") % 10 == 0, None).otherwise(F.lit("ok")))
    writer = S2Writer(
        cfg_for(lite, basin, stream=None),
        stream_column="target",
        on_error="dlq",
        dlq_stream="dead",
        delivery="at-least-once",
    )
    writer(df, 0)
    assert writer.last_metrics is not None
    assert writer.last_metrics.dead_lettered == 3
    assert len(read_stream(lite, basin, "ok")) == 27
    dead = read_stream(lite, basin, "dead")
    assert sorted(orjson.loads(r.body)["id"] for r in dead) == [0, 10, 20]
    assert b"is null" in dict(dead[0].headers)[b"s2sink-error"]


def test_bad_rows_fail_or_skip(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """on_error='fail' raises EncodeError on the driver; 'skip' drops and counts the rows."""
    df = rows_df(spark, 20).withColumn("target", F.when(F.col("id") == 3, None).otherwise(F.lit("fs")))
    failing = S2Writer(cfg_for(lite, basin, stream=None), stream_column="target", delivery="at-least-once")
    with pytest.raises(EncodeError, match=r"stream column 'target' is null"):
        failing(df, 0)
    skipping = S2Writer(
        cfg_for(lite, basin, stream=None), stream_column="target", on_error="skip", delivery="at-least-once"
    )
    skipping(df, 1)
    assert skipping.last_metrics is not None
    assert skipping.last_metrics.skipped == 1


def test_retries_through_injected_503s(
    spark: SparkSession, lite: LiteServer, basin: str, lite_faults: Any
) -> None:
    """503s on append sessions are retried per session and reported; no row is lost."""
    cfg = cfg_for(lite, basin, max_retries=0, retry_delay_ms=10)
    writer = S2Writer(cfg, delivery="at-least-once")
    lite_faults.fail_next_appends(2, status=503)
    writer(rows_df(spark, 2000), 0)
    assert writer.last_metrics is not None
    assert writer.last_metrics.retries >= 1
    assert {b["id"] for b in bodies(lite, basin, "events")} == set(range(2000))


def test_dropped_connections_lose_nothing(
    spark: SparkSession, lite: LiteServer, basin: str, lite_faults: Any
) -> None:
    """Connections dropped mid-batch are survived (SDK and session retries); every row arrives."""
    cfg = cfg_for(lite, basin, request_timeout_ms=2000, max_retries=2, batch_max_records=100)
    writer = S2Writer(cfg, delivery="at-least-once")
    lite_faults.drop_connections(after_appends=4, times=2)
    writer(rows_df(spark, 3000), 0)
    assert {b["id"] for b in bodies(lite, basin, "events")} == set(range(3000))


def test_wrong_token_is_a_clear_error(spark: SparkSession) -> None:
    """A token the server refuses fails the first batch in the driver's preflight, and (with the preflight
    off) in the tasks' WriteError, in the same words, never showing the token."""
    with LiteServer(token="the-right-one") as srv:
        basin = fresh_basin(srv.endpoint, token="the-right-one")
        cfg = S2Config(
            basin=basin,
            stream="events",
            access_token="not-the-right-one",
            account_endpoint=srv.endpoint,
            basin_endpoint=srv.endpoint,
        )
        words = r"refused the access token \(401 authn\): set S2_ACCESS_TOKEN"
        with pytest.raises(PreflightError, match=rf"^S2Writer: basin '{basin}' at .*{words}") as first:
            S2Writer(cfg, delivery="at-least-once")(rows_df(spark, 5), 0)
        unchecked = S2Writer(cfg, delivery="at-least-once", preflight=False)
        with pytest.raises(WriteError, match=words) as tasks:
            unchecked(rows_df(spark, 5), 0)
        for info in (first, tasks):
            assert "not-the-right-one" not in str(info.value)


def test_the_preflight_fails_a_missing_stream_before_any_task(spark: SparkSession, lite: LiteServer) -> None:
    """A target stream that does not exist (create_streams off) fails the first call on the driver, naming
    the stream and the fix, before a Spark job starts; with create_streams the same writer writes."""
    basin = fresh_basin(lite.endpoint, create_stream_on_append=False)
    df = rows_df(spark, 5)
    jobs_before = spark.sparkContext.statusTracker().getJobIdsForGroup()
    with pytest.raises(PreflightError, match=r"stream 'events' does not exist .* set create_streams=True"):
        S2Writer(cfg_for(lite, basin), delivery="at-least-once")(df, 0)
    assert spark.sparkContext.statusTracker().getJobIdsForGroup() == jobs_before
    S2Writer(cfg_for(lite, basin), delivery="at-least-once", create_streams=True)(df, 0)
    assert len(bodies(lite, basin, "events")) == 5


def test_empty_batch_is_a_no_op(spark: SparkSession, lite: LiteServer, basin: str, caplog: Any) -> None:
    """An empty micro-batch writes nothing and still reports (and logs) its metrics."""
    writer = S2Writer(cfg_for(lite, basin, stream="empty"), delivery="at-least-once")
    with caplog.at_level(logging.INFO, logger="s2_sink.writer"):
        writer(rows_df(spark, 10).limit(0), 5)
    assert writer.last_metrics is not None
    assert writer.last_metrics.rows_in == 0
    assert writer.last_metrics.streams == ()
    assert "empty" not in list_streams(lite, basin)
    assert any("s2 batch=5 rows_in=0" in r.getMessage() for r in caplog.records)


def test_schema_errors_are_config_errors(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """A routing column missing from the batch is a ConfigError naming it, raised before any task."""
    writer = S2Writer(cfg_for(lite, basin, stream=None), stream_column="nope", delivery="at-least-once")
    with pytest.raises(ConfigError, match="'nope'"):
        writer(rows_df(spark, 3), 0)


def test_writer_arguments_are_validated() -> None:
    """Bad writer arguments raise ConfigError naming the argument and value."""
    cfg = S2Config(
        basin="test-basin",
        stream="s",
        account_endpoint="http://127.0.0.1:1",
        basin_endpoint="http://127.0.0.1:1",
    )
    with pytest.raises(ConfigError, match="on_error"):
        S2Writer(cfg, on_error="ignore", delivery="at-least-once")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dlq_stream"):
        S2Writer(cfg, on_error="dlq", delivery="at-least-once")
    with pytest.raises(ConfigError, match="shards"):
        S2Writer(cfg, shards=0, delivery="at-least-once")
    with pytest.raises(ConfigError, match="mutually exclusive"):
        S2Writer(cfg, shards=2, stream_column="x", delivery="at-least-once")
    with pytest.raises(ConfigError, match="delivery"):
        S2Writer(cfg, delivery="maybe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="template"):
        S2Writer(cfg, stream_column="a/{b:>3}", delivery="at-least-once")


def test_writer_pickles(lite: LiteServer) -> None:
    """The writer pickles (Spark Connect ships it to the server) with its config intact."""
    import pickle

    writer = S2Writer(
        cfg_for(lite, f"t-{uuid.uuid4().hex[:16]}"),
        UpsertEncoder(key_columns=["id"]),
        delivery="at-least-once",
    )
    back = pickle.loads(pickle.dumps(writer))
    assert back.cfg == writer.cfg
    assert back.routing == writer.routing


def _restart_in_process(
    spark: SparkSession, writer: S2Writer, tmp_path: Path, marker: Path, between: Any
) -> tuple[Exception | None, Exception | None]:
    """Run one micro-batch of 4,000 rows (ids split over two range partitions) through `writer`; while
    `marker` exists the partition holding ids >= 3000 fails once the other one has written (the target
    stream's tail stops moving). Then remove the marker and ``start()`` the same query again in this
    process with the same writer object."""
    src = tmp_path / "src"
    spark.range(4000).coalesce(1).write.parquet(str(src))
    flag, cfg = str(marker), writer.cfg

    @F.udf("long")
    def fail_late(value: int) -> int:
        import asyncio  # imported in the executor's Python worker
        import os
        import time

        from s2_sdk import S2, Endpoints, S2Error

        async def tail() -> int:
            async with S2(
                "test", endpoints=Endpoints(account=cfg.account_endpoint, basin=cfg.basin_endpoint)
            ) as s2:
                try:
                    return (await s2.basin(cfg.basin).stream("events").check_tail()).seq_num
                except S2Error:
                    return 0

        if value >= 3000 and os.path.exists(flag):
            seen, deadline = -1, time.monotonic() + 90
            while time.monotonic() < deadline:
                now = asyncio.run(tail())
                if now > 1 and now == seen:  # more than the run's fence, and no longer moving
                    break
                seen = now
                time.sleep(1.5)
            raise RuntimeError("injected failure in micro-batch 0")
        return value

    def body(df: DataFrame, batch_id: int) -> None:  # the same writer object in every start
        writer(df.repartitionByRange(2, "id").withColumn("id", fail_late("id")), batch_id)

    errors: list[Exception | None] = []
    for _ in range(2):
        query = (
            spark.readStream.schema("id long")
            .parquet(str(src))
            .writeStream.foreachBatch(body)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(240)
        except Exception as exc:  # noqa: BLE001 - the first start fails by design
            errors.append(exc)
        else:
            errors.append(None)
        if marker.exists():
            marker.unlink()
            between()
    return errors[0], errors[1]


def test_restart_in_the_same_process_with_the_same_writer_is_exactly_once(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """A notebook restart: micro-batch 0 fails after one partition wrote, and the query is started again
    in the same Python process with the same S2Writer. The new start is seen (a new Spark run id) and
    recovers: every row exactly once (on the task path: the batch is small enough for the driver's)."""
    writer = S2Writer(cfg_for(lite, basin, create_streams=True, driver_write_max_rows=0))
    marker = tmp_path / "fail"
    marker.touch()
    written: list[int] = []
    between = lambda: written.append(len(bodies(lite, basin, "events")))  # noqa: E731
    first, second = _restart_in_process(spark, writer, tmp_path, marker, between)
    assert first is not None  # the fault fired ...
    assert 0 < written[0] < 4000  # ... after one partition wrote
    assert second is None
    ids = [b["id"] for b in bodies(lite, basin, "events")]
    assert sorted(set(ids)) == list(range(4000))
    assert len(ids) == 4000, f"{len(ids) - 4000} duplicates"


def test_a_skipped_replay_says_so_in_last_metrics(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """A restarted driver's writer called with a batch id the ledger has committed (a replay after a
    restart) writes nothing, and `last_metrics` says the batch was skipped instead of staying None."""
    cfg = cfg_for(lite, basin, create_streams=True)
    writer = S2Writer(cfg, writer_id="replayed-writer")
    writer(rows_df(spark, 20), 0)
    written = writer.last_metrics
    assert written is not None
    assert (written.records, written.replay_skipped) == (20, False)

    new_driver_process()
    restarted = S2Writer(cfg, writer_id="replayed-writer")
    restarted(rows_df(spark, 20), 0)
    assert restarted.last_metrics == BatchMetrics.skipped_replay(0, delivery="exactly-once")
    assert restarted.last_metrics.replay_skipped
    assert restarted.last_metrics.as_dict()["replay_skipped"] is True
    assert len(bodies(lite, basin, "events")) == 20


def _stream_configs(lite: LiteServer, basin: str, names: list[str]) -> dict[str, tuple[Any, Any]]:
    async def go() -> dict[str, tuple[Any, Any]]:
        async with S2("test", endpoints=Endpoints(account=lite.endpoint, basin=lite.endpoint)) as s2:
            out = {}
            for name in names:
                cfg = await s2.basin(basin).get_stream_config(name)
                out[name] = (cfg.retention_policy, cfg.timestamping.mode if cfg.timestamping else None)
            return out

    return asyncio.run(go())


def test_create_streams_keeps_the_config_of_a_stream_that_exists(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """A stream made with infinite retention and arrival timestamps keeps both after exactly-once and
    at-least-once writes with create_streams=True (S2's ensure would set it to the basin's defaults: s2-lite
    lite/src/backend/streams.rs, provision_stream); the ledger the writer creates has infinite retention."""
    kept = StreamConfig(retention_policy="infinite", timestamping=Timestamping(mode=TimestampingMode.ARRIVAL))

    async def make() -> None:
        async with S2("test", endpoints=Endpoints(account=lite.endpoint, basin=lite.endpoint)) as s2:
            await s2.basin(basin).create_stream("events", config=kept)

    asyncio.run(make())
    cfg = cfg_for(lite, basin, create_streams=True, driver_write_max_rows=0)
    S2Writer(cfg, writer_id="kept-config")(rows_df(spark, 20), 0)
    S2Writer(cfg, delivery="at-least-once")(rows_df(spark, 20), 1)
    want = ("infinite", TimestampingMode.ARRIVAL)
    assert _stream_configs(lite, basin, ["events", "_s2sink/ledger/kept-config"]) == {
        "events": want,
        "_s2sink/ledger/kept-config": ("infinite", TimestampingMode.CLIENT_PREFER),
    }
    assert len(bodies(lite, basin, "events")) == 40
