"""Trigger.AvailableNow and admission control of the format("s2") stream reader, driven the way pyspark 4.2+
drives it (``prepareForTriggerAvailableNow``, then ``latestOffset(start, limit)`` until the end stops moving),
against the lite server without Spark. pyspark 4.1 never makes these calls; on it the limit is ``None``."""

from __future__ import annotations

import asyncio
import inspect

import pytest
import s2_sdk

from s2_sink._read.planning.data_loss import positions
from s2_sink.datasource._readers import S2StreamReader
from s2_sink.datasource._source import S2DataSource
from s2_sink.lite import LiteServer


def _append(endpoint: str, basin: str, stream: str, n: int) -> None:
    async def go() -> None:
        s2 = s2_sdk.S2("test", endpoints=s2_sdk.Endpoints(account=endpoint, basin=endpoint))
        async with s2:
            records = [s2_sdk.Record(body=f"r{i}".encode()) for i in range(n)]
            await s2.basin(basin).stream(stream).append(s2_sdk.AppendInput(records=records))

    asyncio.run(go())


def _reader(endpoint: str, basin: str, **extra: str) -> S2StreamReader:
    options = {"s2.basin": basin, "s2.endpoints.account": endpoint, "s2.endpoints.basin": endpoint, **extra}
    source = S2DataSource(options)
    reader = source.streamReader(source.schema())
    assert isinstance(reader, S2StreamReader)
    return reader


def _default_limit(reader: S2StreamReader) -> object:
    try:
        return reader.getDefaultReadLimit()
    except ImportError:  # pyspark 4.1 has no ReadLimit classes
        return None


def _drain(reader: S2StreamReader, limit: object) -> list[int]:
    """Plan batches as the engine does until the end offset stops moving; the records of each batch."""
    start: dict[str, int] = positions(reader.initialOffset())
    sizes: list[int] = []
    for _ in range(20):
        end = positions(reader.latestOffset(dict(start), limit))
        if end == start:
            return sizes
        sizes.append(sum(end.values()) - sum(start.values()))
        start = end
    raise AssertionError(f"no end after 20 batches: {sizes}")


def test_available_now_drains_the_backlog_in_capped_batches_and_stops(lite: LiteServer, basin: str) -> None:
    """With a cap of 2, an AvailableNow run over 5 records plans ceil(5/2) = 3 batches (2, 2, 1) and then
    no more; records appended after the run started wait for the next run."""
    _append(lite.endpoint, basin, "x", 5)
    reader = _reader(lite.endpoint, basin, **{"s2.stream": "x", "s2.max-records-per-trigger": "2"})
    reader.prepareForTriggerAvailableNow()
    _append(lite.endpoint, basin, "x", 3)
    assert _drain(reader, _default_limit(reader)) == [2, 2, 1]


def test_available_now_with_a_byte_cap_and_new_streams(lite: LiteServer, basin: str) -> None:
    """The byte cap applies to AvailableNow batches too, and a stream created under the prefix after the run
    started is left for the next run."""
    _append(lite.endpoint, basin, "p/a", 4)
    reader = _reader(lite.endpoint, basin, **{"s2.stream-prefix": "p/", "s2.max-bytes-per-trigger": "22"})
    reader.prepareForTriggerAvailableNow()
    _append(lite.endpoint, basin, "p/b", 2)
    # "rN" meters 10 bytes: two records per 22-byte batch.
    assert _drain(reader, _default_limit(reader)) == [2, 2]


def test_latest_offset_is_reported_for_the_query_progress(lite: LiteServer, basin: str) -> None:
    """reportLatestOffset gives the tails the last planning call saw (None before any), so the progress shows
    how far the source's end is from the batch's."""
    _append(lite.endpoint, basin, "x", 5)
    reader = _reader(lite.endpoint, basin, **{"s2.stream": "x", "s2.max-records-per-trigger": "2"})
    assert reader.reportLatestOffset() is None
    start = positions(reader.initialOffset())
    assert positions(reader.latestOffset(dict(start), None)) == {"x": 2}
    assert reader.reportLatestOffset() == {"x": 5}


def test_pyspark_4_2_sees_admission_control_and_available_now_support(lite: LiteServer, basin: str) -> None:
    """On pyspark 4.2+ the reader is a SupportsTriggerAvailableNow, its latestOffset takes (start, limit), its
    default limit carries the record cap, and ReadAllAvailable (Trigger.Once) ignores the caps."""
    streaming = pytest.importorskip("pyspark.sql.streaming.datasource")
    _append(lite.endpoint, basin, "x", 5)
    reader = _reader(lite.endpoint, basin, **{"s2.stream": "x", "s2.max-records-per-trigger": "2"})
    assert isinstance(reader, streaming.SupportsTriggerAvailableNow)
    assert list(inspect.signature(reader.latestOffset).parameters) == ["start", "limit"]
    assert reader.getDefaultReadLimit() == streaming.ReadMaxRows(2)
    assert _drain(reader, reader.getDefaultReadLimit()) == [2, 2, 1]
    everything = _reader(lite.endpoint, basin, **{"s2.stream": "x", "s2.max-records-per-trigger": "2"})
    assert _drain(everything, streaming.ReadAllAvailable()) == [5]
