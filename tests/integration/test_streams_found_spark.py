"""An S2Writer hands each micro-batch the streams the one before appended to (`WritePlan.streams_found`), so a
process new to those streams does not ask S2 to create them again. Real Spark, a real S2Writer, and a lite
server of its own that counts requests by kind and stream."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from s2_sink import S2Config, S2Writer
from s2_sink.lite import LiteServer
from s2_sink.lite._stats import StatsSnapshot
from s2_sink.testing import fresh_basin
from tests import _pools as pools
from tests.integration.test_writer_spark import rows_df

pytestmark = pytest.mark.spark

STREAMS = ("found/eu", "found/us", "found/ap")


@pytest.fixture(scope="module")
def counting() -> Iterator[LiteServer]:
    with LiteServer(stats=True) as srv:
        yield srv


@pytest.fixture
def own_pool() -> Iterator[None]:
    with pools.own_pool():
        yield


def _kinds(counting: LiteServer, before: StatsSnapshot) -> Counter[str]:
    """The requests since `before`, by kind (a stream create is a ``control`` request)."""
    assert counting.stats is not None
    since = counting.stats.snapshot() - before
    return Counter(kind for (kind, _), n in since.requests.items() for _ in range(n))


def test_the_second_batch_does_not_create_the_streams_the_first_appended_to(
    spark: SparkSession, counting: LiteServer, own_pool: None
) -> None:
    """Batch 0 creates the three routed streams; batch 1, written where no client has met them, sends no
    create request for any: the writer passed on what batch 0's result rows showed."""
    assert counting.stats is not None
    basin = fresh_basin(counting.endpoint)
    cfg = S2Config(
        basin=basin,
        access_token="test",
        account_endpoint=counting.endpoint,
        basin_endpoint=counting.endpoint,
        create_streams=True,
    )
    writer = S2Writer(cfg, stream_column="target", delivery="at-least-once")
    df = rows_df(spark, 30).withColumn("target", F.concat(F.lit("found/"), F.col("region")))
    before = counting.stats.snapshot()
    writer(df, 0)
    assert _kinds(counting, before)["control"] >= len(STREAMS)  # the preflight, and a create per stream
    pools.new_process()
    before = counting.stats.snapshot()
    writer(df, 1)
    assert writer.last_metrics is not None
    assert writer.last_metrics.rows_in == 30
    assert _kinds(counting, before) == Counter(append=len(STREAMS))  # one append per stream, no create
