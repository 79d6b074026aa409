"""format("s2") read-committed reads with a real local Spark against the lite server: an exactly-once writer
whose driver dies mid-batch, read batch and streaming, with and without s2.isolation=read-committed."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from s2_sink.datasource import register
from tests.faults._support import cfg_for
from tests.integration._eo_batches import commit, open_execution, write_partitions
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


@pytest.fixture
def stopper() -> Iterator[list[Any]]:
    """Stops every query a test started, even when it fails."""
    queries: list[Any] = []
    yield queries
    for q in queries:
        q.stop()


def _batch(sp: SparkSession, options: dict[str, str]) -> Counter[bytes]:
    return Counter(bytes(r.body) for r in sp.read.format("s2").options(**options).load().collect())


def _parquet(sp: SparkSession, path: Path) -> Counter[bytes]:
    if not any(path.glob("*.parquet")):
        return Counter()
    return Counter(bytes(r.body) for r in sp.read.parquet(str(path)).collect())


def _records(*names: str) -> Counter[bytes]:
    return Counter(name.encode() for name in names)


def test_read_committed_never_shows_part_of_a_micro_batch(
    sp: SparkSession, endpoint: str, tmp_path: Path, stopper: list[Any]
) -> None:
    """An exactly-once writer commits batch 0, then its driver dies after one of batch 1's two partitions
    was written. Read-committed batch and streaming reads show exactly batch 0; read-uncommitted shows the
    partial batch too. The replay commits batch 1: the running stream and a new batch read then show all of
    it, each record once. Records of a stream the writer never committed to stay hidden, and a partial
    batch 2 appended meanwhile is not shown."""
    basin = new_basin(endpoint, "events", "other")
    cfg = cfg_for(endpoint, basin)
    first = open_execution(cfg, "orders")
    commit(first, cfg, 0, write_partitions(first, cfg, 0, {0: [b"a0", b"a1"], 1: [b"a2", b"a3"]}))
    dead = open_execution(cfg, "orders")
    write_partitions(dead, cfg, 1, {0: [b"b0", b"b1"]})  # the driver dies before the commit
    append(endpoint, basin, "other", bodies("x0"))  # a stream the writer never committed to

    uncommitted = opts(endpoint, basin, **{"s2.streams": "events,other"})
    committed = {**uncommitted, "s2.isolation": "read-committed", "s2.committed-by": "orders"}
    batch0 = _records("a0", "a1", "a2", "a3")
    assert _batch(sp, uncommitted) == batch0 + _records("b0", "b1", "x0")
    assert _batch(sp, committed) == batch0

    out = tmp_path / "out"
    df = sp.readStream.format("s2").options(**committed).load().select("body")
    q = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    stopper.append(q)
    q.processAllAvailable()
    assert _parquet(sp, out) == batch0

    replay = open_execution(cfg, "orders")
    assert replay.recovery
    commit(replay, cfg, 1, write_partitions(replay, cfg, 1, {0: [b"b0", b"b1"], 1: [b"b2", b"b3"]}))
    partial = open_execution(cfg, "orders")
    write_partitions(partial, cfg, 2, {0: [b"c0"]})  # batch 2 in flight, not committed
    q.processAllAvailable()
    both = batch0 + _records("b0", "b1", "b2", "b3")
    assert _parquet(sp, out) == both
    assert _batch(sp, committed) == both
    assert _batch(sp, uncommitted) == both + _records("c0", "x0")
    # Every micro-batch of the stream read whole committed batches: batch 0's 4 records, then batch 1's 4.
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [4, 4]


def test_read_committed_by_a_writer_without_a_ledger_fails_on_the_driver(
    sp: SparkSession, endpoint: str
) -> None:
    """A writer id with no ledger in the basin (a typo, or the writer never ran) fails the read when it is
    planned, naming s2.committed-by, the id and the ledger stream looked for."""
    basin = new_basin(endpoint, "events")
    options = opts(
        endpoint,
        basin,
        **{"s2.stream": "events", "s2.isolation": "read-committed", "s2.committed-by": "nobody"},
    )
    with pytest.raises(Exception, match="ConfigError") as info:
        sp.read.format("s2").options(**options).load().collect()
    assert "s2.committed-by='nobody'" in str(info.value)
    assert "'_s2sink/ledger/nobody'" in str(info.value)
