"""format("s2") streaming reads as an operator meets them, against the lite server with a real local Spark:
Kafka option names refused, AvailableNow draining a capped backlog, a stream recreated under a checkpoint,
and the source's offsets in the query progress."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest
import s2_sdk
from pyspark.sql import SparkSession

from tests.integration.test_datasource_read import _client, append, bodies, new_basin, opts

pytestmark = [pytest.mark.spark]

# pyspark 4.2+ lets a Python source see the trigger (SupportsTriggerAvailableNow) and the read limit.
HAS_AVAILABLE_NOW = importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None
PYSPARK = tuple(int(part) for part in pyspark.__version__.split(".")[:2])


@pytest.fixture(scope="module")
def sp(spark: SparkSession) -> SparkSession:
    """The shared Spark session with format("s2") registered."""
    from s2_sink.datasource import register

    register(spark)
    return spark


@pytest.fixture
def endpoint(lite: Any) -> str:
    """The lite server's endpoint."""
    return str(lite.endpoint)


@pytest.fixture
def stopper() -> Iterator[list[Any]]:
    """Queries to stop after the test, whatever happened."""
    queries: list[Any] = []
    yield queries
    for q in queries:
        q.stop()


def _recreate(endpoint: str, basin: str, stream: str) -> None:
    async def go() -> None:
        async with _client(endpoint) as s2:
            await s2.basin(basin).delete_stream(stream)
            for _ in range(100):  # deletion may take a moment to free the name
                try:
                    await s2.basin(basin).create_stream(stream)
                    return
                except s2_sdk.S2ServerError:
                    await asyncio.sleep(0.1)
            raise AssertionError(f"could not create {stream!r} again")

    asyncio.run(go())


def _start(sp: SparkSession, options: dict[str, str], out: Path, ckpt: Path, **trigger: Any) -> Any:
    df = sp.readStream.format("s2").options(**options).load().select("stream", "seq_num", "body")
    writer = df.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ckpt))
    return (writer.trigger(**trigger) if trigger else writer).start()


def _seqs(sp: SparkSession, out: Path) -> list[int]:
    return sorted(r.seq_num for r in sp.read.parquet(str(out)).collect())


def _bodies(sp: SparkSession, out: Path) -> list[bytes]:
    return sorted(bytes(r.body) for r in sp.read.parquet(str(out)).collect())


def test_a_kafka_option_fails_the_streaming_query_naming_the_s2_option(
    sp: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    """startingOffsets on readStream.format('s2') fails the query as it starts, naming the option, its value
    and the s2 option to use; on spark.read the same holds for maxOffsetsPerTrigger's kin."""
    options = {**opts(endpoint, "unused-kafka-basin", **{"s2.stream": "x"}), "startingOffsets": "earliest"}
    df = sp.readStream.format("s2").options(**options).load()
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
    try:
        with pytest.raises(Exception, match="is a Kafka source option") as info:
            query.awaitTermination(60)
    finally:
        query.stop()
    assert "option startingoffsets='earliest'" in str(info.value)
    assert ".option('s2.starting-position', 'earliest')" in str(info.value)

    batch = {**opts(endpoint, "unused-kafka-basin", **{"s2.stream": "x"}), "subscribe": "orders"}
    with pytest.raises(Exception, match=r"use \.option\('s2\.stream', 'orders'\)"):
        sp.read.format("s2").options(**batch).load().collect()


@pytest.mark.skipif(not HAS_AVAILABLE_NOW, reason="pyspark < 4.2: a Python source cannot see AvailableNow")
@pytest.mark.parametrize(("n", "cap"), [(500, 120), (7, 7)])
def test_available_now_drains_everything_in_capped_batches(
    sp: SparkSession, endpoint: str, tmp_path: Path, n: int, cap: int
) -> None:
    """With s2.max-records-per-trigger=C, one Trigger.AvailableNow run over N records reads all N in
    ceil(N/C) batches of at most C, and ends."""
    basin = new_basin(endpoint, "x")
    append(endpoint, basin, "x", bodies(*(f"x{i}" for i in range(n))))
    options = opts(endpoint, basin, **{"s2.stream": "x", "s2.max-records-per-trigger": str(cap)})
    q = _start(sp, options, tmp_path / "o", tmp_path / "c", availableNow=True)
    try:
        assert q.awaitTermination(180), "the AvailableNow query did not end"
    finally:
        q.stop()
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert len(sizes) == math.ceil(n / cap)
    assert max(sizes) <= cap
    assert _seqs(sp, tmp_path / "o") == list(range(n))


def test_a_recreated_stream_fails_the_restarted_query_unless_told_to_go_on(
    sp: SparkSession, endpoint: str, tmp_path: Path, stopper: list[Any]
) -> None:
    """500 records read under a checkpoint; the stream is deleted, created again and given 500 new records
    (the same tail). The restarted query fails naming the stream, the checkpointed offset, the tail and
    s2.fail-on-data-loss; with that option false it reads the 500 new records from the new stream's start."""
    basin = new_basin(endpoint, "x")
    append(endpoint, basin, "x", bodies(*(f"old{i}" for i in range(500))))
    options = opts(endpoint, basin, **{"s2.stream": "x"})
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = _start(sp, options, out, ckpt)
    stopper.append(q)
    q.processAllAvailable()
    q.stop()
    assert _seqs(sp, out) == list(range(500))

    _recreate(endpoint, basin, "x")
    append(endpoint, basin, "x", bodies(*(f"new{i}" for i in range(500))))
    q2 = _start(sp, options, out, ckpt)
    stopper.append(q2)
    with pytest.raises(Exception, match="was created again") as info:
        q2.awaitTermination(120)
    text = str(info.value)
    assert f"stream 'x' in basin '{basin}'" in text
    assert "the checkpointed offset is seq_num 500, the stream's tail is 500" in text
    assert "s2.fail-on-data-loss=false" in text

    q3 = _start(sp, {**options, "s2.fail-on-data-loss": "false"}, out, ckpt)
    stopper.append(q3)
    q3.processAllAvailable()
    got = _bodies(sp, out)
    assert len(got) == 1000
    assert sorted(b for b in got if b.startswith(b"new")) == sorted(f"new{i}".encode() for i in range(500))


def _checkpoint_text(ckpt: Path, batch: int) -> str:
    # An offset log file: a version line, the metadata line, then one line per source.
    return (ckpt / "offsets" / str(batch)).read_text().splitlines()[2]


def _checkpoint_offset(ckpt: Path, batch: int) -> Any:
    return json.loads(_checkpoint_text(ckpt, batch))


def test_progress_shows_the_source_offsets_as_the_checkpoint_json(
    sp: SparkSession, endpoint: str, tmp_path: Path, stopper: list[Any]
) -> None:
    """The query progress's JSON holds the source's end offset as the JSON object the checkpoint's offset log
    holds for that batch (positions and stream epochs), parsed equal."""
    basin = new_basin(endpoint, "orders")
    append(endpoint, basin, "orders", bodies(*(f"o{i}" for i in range(30))))
    options = opts(endpoint, basin, **{"s2.stream": "orders", "s2.max-records-per-trigger": "10"})
    ckpt = tmp_path / "ckpt"
    q = _start(sp, options, tmp_path / "out", ckpt)
    stopper.append(q)
    q.processAllAvailable()
    progress = [json.loads(p.json) for p in q.recentProgress if p["numInputRows"]]
    assert [p["sources"][0]["numInputRows"] for p in progress] == [10, 10, 10]
    for p in progress:
        source = p["sources"][0]
        assert source["endOffset"] == _checkpoint_offset(ckpt, p["batchId"])
        assert source["endOffset"]["orders"] in (10, 20, 30)
    last_progress = [p for p in q.recentProgress if p["numInputRows"]][-1]
    last = last_progress.sources[0]
    if PYSPARK >= (4, 2):
        # pyspark 4.1's SourceProgress str()s the parsed offset (a Python repr); 4.2 keeps it JSON text.
        assert last.endOffset == _checkpoint_text(ckpt, last_progress.batchId)
    if HAS_AVAILABLE_NOW:
        # reportLatestOffset: the tails, so the progress shows the lag as latestOffset - endOffset.
        assert json.loads(last.latestOffset) == {"orders": 30}
