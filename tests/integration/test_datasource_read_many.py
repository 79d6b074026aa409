"""format("s2") reads of many small streams, batch and streaming, against the lite server with a real local
Spark: small streams share partitions, and every record is read once with its own stream and seq_num."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import s2_sdk
from pyspark.sql import SparkSession

from s2_sink.datasource import register
from tests.integration.test_datasource_read import _client, new_basin, opts

pytestmark = [pytest.mark.spark]


def _fill(endpoint: str, basin: str, streams: dict[str, int], *, first: int = 0) -> None:
    """Append ``n`` records to each stream (created if missing), bodies ``<stream>:<i>`` from ``first``."""

    async def go() -> None:
        async with _client(endpoint) as s2:
            b = s2.basin(basin)
            gate = asyncio.Semaphore(32)

            async def one(stream: str, n: int) -> None:
                async with gate:
                    records = [s2_sdk.Record(body=f"{stream}:{i}".encode()) for i in range(first, first + n)]
                    await b.stream(stream).append(s2_sdk.AppendInput(records=records))

            await asyncio.gather(*(one(s, n) for s, n in streams.items() if n))

    asyncio.run(go())


@pytest.fixture(scope="module")
def sp(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


@pytest.fixture
def endpoint(lite: Any) -> str:
    return str(lite.endpoint)


def test_batch_read_of_many_streams_reads_each_record_once_in_few_partitions(
    sp: SparkSession, endpoint: str
) -> None:
    """120 small streams and one large one under a prefix: every record once with its stream and seq_num,
    the commands of a stream left out, and the planned partitions bounded by s2.records-per-partition (the
    small streams share them; the large stream is split) rather than one per stream."""
    basin = new_basin(endpoint, create_on_append=True)
    sizes = {f"t/{i:03d}": 1 + i % 7 for i in range(120)}
    _fill(endpoint, basin, {**sizes, "t/big": 450})

    async def fence() -> None:  # a command record among the data: seq_num 3 of t/005 is no row
        async with _client(endpoint) as s2:
            await (
                s2.basin(basin)
                .stream("t/005")
                .append(s2_sdk.AppendInput(records=[s2_sdk.CommandRecord.fence("f")]))
            )

    asyncio.run(fence())
    _fill(endpoint, basin, {"t/005": 2}, first=sizes["t/005"])
    sizes["t/005"] += 2
    expected = sorted(
        [(s, i if s != "t/005" or i < 6 else i + 1, f"{s}:{i}") for s, n in sizes.items() for i in range(n)]
        + [("t/big", i, f"t/big:{i}") for i in range(450)]
    )
    records = sum(sizes.values()) + 450
    df = (
        sp.read.format("s2")
        .options(**opts(endpoint, basin, **{"s2.stream-prefix": "t/", "s2.records-per-partition": "200"}))
        .load()
    )
    got = sorted((r.stream, r.seq_num, bytes(r.body).decode()) for r in df.collect())
    assert got == expected
    # t/big in pieces of 200 (the last shares); the rest packed: ceil(records / 200) and a piece at most.
    assert df.rdd.getNumPartitions() <= -(-records // 200) + 1
    assert df.count() == records

    typed = (
        sp.read.format("s2")
        .options(**opts(endpoint, basin, **{"s2.stream-prefix": "t/0", "s2.format": "kafka"}))
        .load()
    )
    assert typed.rdd.getNumPartitions() == 1
    rows = typed.select("stream", "seq_num", "value").collect()
    assert sorted((r.stream, r.seq_num) for r in rows) == sorted(
        (s, seq) for s, seq, _ in expected if s.startswith("t/0")
    )


def test_streaming_read_of_many_streams_across_micro_batches(
    sp: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    """A prefix read of 60 streams with s2.max-records-per-trigger: each micro-batch within the cap and
    read in few partitions; streams created while the query runs are read from their first record; after a
    restart from the checkpoint every record has been delivered once."""
    basin = new_basin(endpoint, create_on_append=True)
    first = {f"u/{i:02d}": 5 for i in range(60)}
    _fill(endpoint, basin, first)
    options = opts(
        endpoint,
        basin,
        **{"s2.stream-prefix": "u/", "s2.max-records-per-trigger": "120", "s2.records-per-partition": "100"},
    )
    seen: list[tuple[str, int, str]] = []
    batches: list[tuple[int, int]] = []

    def collect(df: Any, _batch_id: int) -> None:
        rows = df.collect()
        batches.append((len(rows), df.rdd.getNumPartitions()))
        seen.extend((r.stream, r.seq_num, bytes(r.body).decode()) for r in rows)

    def start() -> Any:
        return (
            sp.readStream.format("s2")
            .options(**options)
            .load()
            .writeStream.foreachBatch(collect)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )

    q = start()
    try:
        q.processAllAvailable()
        _fill(endpoint, basin, {f"u/{i:02d}": 3 for i in range(0, 60, 2)}, first=5)
        later = {f"u/new{i:02d}": 4 for i in range(20)}
        _fill(endpoint, basin, later)
        q.processAllAvailable()
    finally:
        q.stop()
    _fill(endpoint, basin, {"u/07": 2, "u/new03": 1}, first=10)
    q = start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()

    totals = dict(first)
    for i in range(0, 60, 2):
        totals[f"u/{i:02d}"] += 3
    totals.update(later)
    expected = sorted((s, i, f"{s}:{i}") for s, n in totals.items() for i in range(n))
    expected += [("u/07", 5, "u/07:10"), ("u/07", 6, "u/07:11"), ("u/new03", 4, "u/new03:10")]
    assert sorted(seen) == sorted(expected)  # once each: no loss, no repeat across the restart
    sizes = [n for n, _ in batches if n]
    assert max(sizes) <= 120
    assert all(parts <= -(-n // 100) + 1 for n, parts in batches if n)


def test_a_recreated_stream_among_many_fails_the_query(
    sp: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    """One of 50 streams deleted and created again between two runs fails the restarted query naming it
    (s2.fail-on-data-loss defaults to true), as it does for a stream read alone."""
    basin = new_basin(endpoint, create_on_append=True)
    _fill(endpoint, basin, {f"v/{i:02d}": 3 for i in range(50)})
    options = opts(endpoint, basin, **{"s2.stream-prefix": "v/"})

    def start() -> Any:
        return (
            sp.readStream.format("s2")
            .options(**options)
            .load()
            .writeStream.format("noop")
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .start()
        )

    q = start()
    try:
        q.processAllAvailable()
    finally:
        q.stop()

    async def recreate() -> None:
        async with _client(endpoint) as s2:
            b = s2.basin(basin)
            await b.delete_stream("v/17")
            for _ in range(100):
                try:
                    await b.create_stream("v/17")
                    return
                except s2_sdk.S2ServerError:
                    await asyncio.sleep(0.1)  # still being deleted

    asyncio.run(recreate())
    _fill(endpoint, basin, {"v/17": 5})
    q = start()
    try:
        with pytest.raises(Exception, match=r"v/17") as info:
            q.awaitTermination(120)
    finally:
        q.stop()
    assert "s2.fail-on-data-loss" in str(info.value)
