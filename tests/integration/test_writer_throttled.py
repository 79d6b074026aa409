"""S2Writer against a lite server that enforces S2's append limits (``throttle=True``): 429s are retried."""

from __future__ import annotations

from collections.abc import Iterator

import orjson
import pytest
from pyspark.sql import SparkSession

from s2_sink import S2Config, S2Writer
from s2_sink.encoders import InsertEncoder
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.integration._s2read import read_stream

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def throttled() -> Iterator[LiteServer]:
    """A lite server answering 429 rate_limited over 200 batches/s per stream per connection."""
    with LiteServer(throttle=True) as srv:
        yield srv


def test_throttled_write_completes_exactly_once(spark: SparkSession, throttled: LiteServer) -> None:
    """One record per batch drives each task's session past 200 batches/s: the server refuses with 429, the
    writer waits the window out, reopens its session and re-sends, every row lands once, and the retries
    show in the metrics."""
    basin = fresh_basin(throttled.endpoint)
    cfg = S2Config(
        basin=basin,
        stream="events",
        access_token="test",
        account_endpoint=throttled.endpoint,
        basin_endpoint=throttled.endpoint,
        batch_max_records=1,
    )
    writer = S2Writer(cfg, InsertEncoder(), writer_id="throttled-writer")
    writer(spark.range(1200, numPartitions=2), 0)
    ids = sorted(orjson.loads(r.body)["id"] for r in read_stream(throttled.endpoint, basin, "events"))
    assert ids == list(range(1200))
    metrics = writer.last_metrics
    assert metrics is not None
    assert metrics.records == 1200
    assert metrics.retries > 0
