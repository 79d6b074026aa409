"""Poison routing values through the public API in real Spark: a routing column holding an empty or a
600-byte value among good rows. Such a row once failed its micro-batch on every replay, whatever
``on_error`` said; now it is a bad row like a null one, for ``foreachBatch(S2Writer)`` and ``format("s2")``
alike, exactly once under the default delivery."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path
from typing import Any

import orjson
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.readwriter import DataStreamWriter

from s2_sink import S2Writer
from s2_sink.datasource import register
from s2_sink.errors import EncodeError
from s2_sink.lite import LiteServer
from tests.integration._s2read import list_streams, read_stream
from tests.integration.test_datasource_read import opts
from tests.integration.test_writer_spark import cfg_for

pytestmark = pytest.mark.spark

LONG = "x" * 600
"""Over S2's 512-byte limit for a stream name."""


def _target(i: int) -> str:
    """Row `i`'s routing value: every tenth row a poison one (empty, then 600 bytes), the rest good."""
    if i % 10 == 3:
        return "" if i % 20 == 3 else LONG
    return "ok/eu" if i % 2 else "ok/us"


def _rows(spark: SparkSession, ids: range) -> DataFrame:
    return spark.createDataFrame([(i, _target(i)) for i in ids], "id long, target string")


def _stream(spark: SparkSession, tmp_path: Path) -> DataFrame:
    """A streaming source of two micro-batches of (id, target) rows, ids 0-39 and 40-79 (a parquet
    file each)."""
    src = tmp_path / "src"
    src.mkdir()
    for n, ids in enumerate([range(40), range(40, 80)]):
        _rows(spark, ids).coalesce(1).write.parquet(str(tmp_path / f"stage{n}"))
        next((tmp_path / f"stage{n}").glob("*.parquet")).rename(src / f"part-{n:04d}.parquet")
    return spark.readStream.schema("id long, target string").option("maxFilesPerTrigger", 1).parquet(str(src))


def _run(sink: DataStreamWriter, tmp_path: Path) -> None:
    """Run the query until its source is drained; it must not fail."""
    query = sink.option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start()
    query.awaitTermination(240)
    assert query.exception() is None


def _ids(endpoint: str, basin: str, stream: str) -> list[int]:
    return [orjson.loads(r.body)["id"] for r in read_stream(endpoint, basin, stream)]


def _check_landed(endpoint: str, basin: str, ids: range) -> list[Any]:
    """Every good row once in its stream, every poison row once in "dead" and nowhere else; the dead
    letters, in id order."""
    assert sorted(list_streams(endpoint, basin, "ok/")) == ["ok/eu", "ok/us"]
    assert sorted(s for s in list_streams(endpoint, basin) if not s.startswith(("ok/", "_s2sink/"))) == [
        "dead"
    ]
    for stream in ("ok/eu", "ok/us"):
        got = _ids(endpoint, basin, stream)
        assert Counter(got) == Counter(i for i in ids if _target(i) == stream), stream
    letters = read_stream(endpoint, basin, "dead")
    assert Counter(orjson.loads(r.body)["id"] for r in letters) == Counter(i for i in ids if i % 10 == 3)
    return sorted(letters, key=lambda r: orjson.loads(r.body)["id"])


def test_s2writer_query_dead_letters_poison_routing_values(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """A streaming query over two micro-batches with on_error='dlq' (exactly-once, the default): every
    good row lands once in its stream, each poison row is a dead letter saying why in the sink's words,
    counted in the metrics. (Before, the first batch failed on the empty name and never passed.)"""
    writer = S2Writer(
        cfg_for(lite, basin, stream=None, create_streams=True),
        stream_column="target",
        on_error="dlq",
        dlq_stream="dead",
    )
    _run(_stream(spark, tmp_path).writeStream.foreachBatch(writer), tmp_path)
    letters = _check_landed(lite.endpoint, basin, range(80))
    assert [m.dead_lettered for m in writer.history] == [4, 4]
    empty, long = (dict(r.headers) for r in letters[:2])
    assert empty[b"s2sink-error"] == (
        b"routing value '' of stream column 'target' is not a valid S2 stream name: it is empty"
    )
    assert (
        long[b"s2sink-error"]
        == (
            f"routing value {'x' * 40!r}... (600 characters) of stream column 'target' is not a valid S2 "
            "stream name: it is 600 bytes of UTF-8, over S2's limit of 512"
        ).encode()
    )
    assert (empty[b"s2sink-target-stream"], long[b"s2sink-target-stream"]) == (b"", LONG.encode())


def test_s2writer_fail_names_the_value_and_the_fix_and_skip_counts(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """on_error='fail' (the default) raises EncodeError naming the row, the routing column, the value and
    the fixes; 'skip' writes the good rows and counts the poison ones."""
    df = _rows(spark, range(4, 24)).coalesce(1)  # row 9 of the batch is id 13 (600 bytes)
    cfg = cfg_for(lite, basin, stream=None, create_streams=True)
    with pytest.raises(EncodeError) as failed:
        S2Writer(cfg, stream_column="target", delivery="at-least-once")(df, 0)
    message = str(failed.value)
    # A batch this small is written by the driver (sink.driver-write.max-rows), and the error says so.
    assert "row 9 of the driver's write in batch 0: routing value 'xxxxxxxxxx" in message
    assert "(600 characters) of stream column 'target' is not a valid S2 stream name" in message
    assert "(fix or filter such rows, or set on_error='skip' or 'dlq')" in message
    skipping = S2Writer(cfg, stream_column="target", on_error="skip", delivery="at-least-once")
    skipping(df, 1)
    assert skipping.last_metrics is not None
    assert (skipping.last_metrics.skipped, skipping.last_metrics.records) == (2, 18)


@pytest.fixture(scope="module")
def sp(spark: SparkSession) -> SparkSession:
    """The shared Spark session with format("s2") registered."""
    register(spark)
    return spark


def test_format_s2_streaming_write_dead_letters_poison_routing_values(
    sp: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """writeStream.format("s2") routed by a column (exactly-once, the default) over two micro-batches:
    the same outcome as S2Writer, good rows once in their streams and poison rows dead letters."""
    options = opts(
        lite.endpoint,
        basin,
        **{"s2.stream-column": "target", "s2.on-error": "dlq", "s2.dlq-stream": "dead"},
        **{"s2.create-streams": "true"},
    )
    _run(_stream(sp, tmp_path).writeStream.format("s2").options(**options), tmp_path)
    letters = _check_landed(lite.endpoint, basin, range(80))
    assert dict(letters[0].headers)[b"s2sink-error"].startswith(b"routing value '' of stream column 'target'")


def test_format_s2_template_poison_fails_naming_the_value(
    sp: SparkSession, lite: LiteServer, basin: str
) -> None:
    """A stream template whose result is no valid name fails a format("s2") write with the value, the
    template and the fix (before: the lite server's 422 for the append, on every retry)."""
    df = sp.createDataFrame([("eu",), (".",)], "region string").coalesce(1)
    options = opts(lite.endpoint, basin, **{"s2.stream-column": "{region}", "s2.create-streams": "true"})
    with pytest.raises(Exception, match="EncodeError") as failed:
        df.write.format("s2").options(**options).mode("append").save()
    assert (
        "row 1 of partition 0 in batch 0: routing value '.' of stream template '{region}' is not a valid S2 "
        "stream name: S2 refuses '.' and '..' (fix or filter such rows" in str(failed.value)
    )


async def _dead_tail(endpoint: str, basin: str) -> int:
    from s2_sdk import S2, Endpoints

    async with S2("test", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
        return (await s2.basin(basin).stream("dead").check_tail()).seq_num


def test_a_restarted_query_writes_poison_rows_dead_letters_once(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """Exactly-once across a restart: micro-batch 1 fails after one partition wrote its good rows and the
    dead letters of its poison rows; the query started again replays the batch laid out by content (the
    poison target in the hash) and completes it: every good row and every dead letter exactly once.
    (Micro-batch 0 goes by target stream, as a routed writer's first does, and its few streams of many rows
    make the next one narrowed: each input partition written by its own task.)"""
    src = tmp_path / "src"
    src.mkdir()
    for n, ids in enumerate([range(1000), range(1000, 2000)]):
        _rows(spark, ids).coalesce(1).write.parquet(str(tmp_path / f"stage{n}"))
        next((tmp_path / f"stage{n}").glob("*.parquet")).rename(src / f"part-{n:04d}.parquet")
    marker = tmp_path / "fail"
    marker.touch()
    flag, endpoint = str(marker), lite.endpoint

    @F.udf("long")
    def fail_late(value: int) -> int:
        import asyncio  # in the executor's Python worker
        import os
        import time

        from pyspark import TaskContext
        from s2_sdk import S2, Endpoints

        async def tail() -> int:
            async with S2("test", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
                return (await s2.basin(basin).stream("dead").check_tail()).seq_num

        # Batch 1's second range partition, whatever its bounds: the range sampling's seed counts the
        # context's RDDs, so which ids each partition holds depends on what the session ran before.
        context = TaskContext.get()
        if value >= 1000 and context is not None and context.partitionId() == 1 and os.path.exists(flag):
            with open(flag) as fh:
                floor = int(fh.read() or 1)  # the dead stream's tail before this batch
            seen, deadline = -1, time.monotonic() + 90
            while time.monotonic() < deadline:  # until the other partition's dead letters stop coming
                now = asyncio.run(tail())
                # Dead letters beyond the batch's command records (fences, tags), and no longer moving.
                if now > floor + 10 and now == seen:
                    break
                seen = now
                time.sleep(1.5)
            raise RuntimeError("injected failure in micro-batch 1")
        return value

    writer = S2Writer(
        cfg_for(lite, basin, stream=None, create_streams=True, driver_write_max_rows=0),
        stream_column="target",
        on_error="dlq",
        dlq_stream="dead",
    )

    def body(df: DataFrame, batch_id: int) -> None:
        if batch_id == 1 and marker.exists():  # where the dead stream stands after batch 0
            marker.write_text(str(asyncio.run(_dead_tail(endpoint, basin))))
        writer(df.repartitionByRange(2, "id").withColumn("id", fail_late("id")), batch_id)

    failures, written = [], -1
    for _ in range(2):
        query = (
            spark.readStream.schema("id long, target string")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(src))
            .writeStream.foreachBatch(body)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(240)
        except Exception as exc:  # noqa: BLE001 - the first start fails by design
            failures.append(exc)
        if marker.exists():
            marker.unlink()
            written = len(read_stream(lite.endpoint, basin, "dead"))
    assert len(failures) == 1
    assert 100 < written < 200  # the first run: batch 0's 100 poison rows and part of batch 1's 100
    _check_landed(lite.endpoint, basin, range(2000))
