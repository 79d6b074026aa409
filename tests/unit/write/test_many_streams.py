"""One task routing its rows to hundreds of streams, against the lite server: each stream's rows of the
task go out as few appends as their size allows (not one per row, however the streams interleave), in
order, over a bounded number of open append sessions."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pyarrow as pa
import pytest
from s2_sdk import AppendAck, StreamPosition, TimestampingMode

from s2_sink._transport import runtime, sdk
from s2_sink._transport.append_session import BulkAppendSession
from s2_sink._write.task import appender
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.task.results import StreamTotals
from s2_sink._write.write_plan import WritePlan
from s2_sink.lite import LiteServer
from tests.faults._support import make_basin
from tests.integration._s2read import read_stream, read_streams
from tests.unit.transport.test_create_streams_keeps_config import KEPT, _configs, _configure
from tests.unit.write.test_partition_writer import config, ctx, frame, stream_rows

STREAMS = 300
ROWS = 3000  # ten rows per stream, the streams interleaved row by row


def _batches() -> list[pa.RecordBatch]:
    bodies = [str(i).encode() for i in range(ROWS)]
    streams = [f"tenant/{i % STREAMS:03d}" for i in range(ROWS)]
    half = ROWS // 2  # two Arrow batches: a stream's rows of the task span both
    return [frame(bodies[:half], streams=streams[:half]), frame(bodies[half:], streams=streams[half:])]


def test_interleaved_streams_get_one_append_each_in_order(lite: LiteServer, basin: str) -> None:
    """300 streams interleaved row by row, ten small rows each: one append per stream (before, past 64
    open streams every row went out as an append of its own), each stream's rows in their order."""
    plan = WritePlan(cfg=config(lite, basin, create_streams=True), batch_id=0, stream_column="_s2_stream")
    rows = stream_rows(write_partition(plan, _batches(), ctx()))
    per_stream = {name: r for name, r in rows.items() if name is not None}
    assert len(per_stream) == STREAMS
    assert {r["records"] for r in per_stream.values()} == {ROWS // STREAMS}
    assert {r["appends"] for r in per_stream.values()} == {1}
    some = (0, 1, 150, STREAMS - 1)
    got = read_streams(lite.endpoint, basin, [f"tenant/{s:03d}" for s in some])
    for s, records in zip(some, got.values(), strict=True):
        assert [int(r.body) for r in records] == list(range(s, ROWS, STREAMS))


def test_open_append_sessions_stay_bounded(
    lite: LiteServer, basin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Appending to 300 streams, a task never has more than its bound of append sessions open on its
    connections, closing ones included (HTTP/2 streams counted on the connections themselves, as each
    session opens; before, one per stream: 300), and every record lands."""
    most = [0]

    class Counted(BulkAppendSession):
        def __init__(self, client: Any, stream: str, *args: Any) -> None:
            states = [sdk.h2_state(conn) for conn in sdk.pooled_connections(client)]
            most[0] = max(most[0], sum(s.open_outbound_streams for s in states if s is not None))
            super().__init__(client, stream, *args)

    monkeypatch.setattr(appender, "BulkAppendSession", Counted)
    # Small appends force a chunk per 4 rows, so sessions open while others still have chunks to come.
    cfg = config(lite, basin, create_streams=True, batch_max_records=4)
    plan = WritePlan(cfg=cfg, batch_id=0, stream_column="_s2_stream")
    rows = stream_rows(write_partition(plan, _batches(), ctx()))
    assert sum(r["records"] for name, r in rows.items() if name is not None) == ROWS
    assert 0 < most[0] <= appender._OPEN_SESSIONS + appender._CLOSING_SESSIONS
    assert [int(r.body) for r in read_stream(lite.endpoint, basin, "tenant/007")] == list(
        range(7, ROWS, STREAMS)
    )


def test_a_tasks_new_streams_are_created_together_once_and_existing_ones_kept(
    lite: LiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``create_streams``, the streams a task meets are created concurrently (at most
    `CREATE_CONCURRENCY` at once; before, one after the other as each stream's first append went out),
    once per process (a second batch asks S2 nothing), and a stream that exists keeps its configuration."""
    basin = make_basin(lite.endpoint)
    _configure(lite.endpoint, basin, ["tenant/000", "tenant/299"], KEPT, create=True)
    calls: list[str] = []
    now = [0]
    most = [0]
    create = runtime.create_if_missing

    async def counted(b: Any, stream: str, config: Any = None) -> bool:
        calls.append(stream)
        now[0] += 1
        most[0] = max(most[0], now[0])
        try:
            await asyncio.sleep(0.005)  # a create takes a round trip: let the others start meanwhile
            return await create(b, stream, config)
        finally:
            now[0] -= 1

    monkeypatch.setattr(runtime, "create_if_missing", counted)
    cfg = config(lite, basin, create_streams=True)
    plan = WritePlan(cfg=cfg, batch_id=0, stream_column="_s2_stream")
    write_partition(plan, _batches(), ctx())
    assert sorted(calls) == sorted({f"tenant/{i:03d}" for i in range(STREAMS)})
    assert 1 < most[0] <= runtime.CREATE_CONCURRENCY
    calls.clear()
    write_partition(dataclasses.replace(plan, batch_id=1), _batches(), ctx(1))
    assert calls == []
    kept = ("infinite", TimestampingMode.ARRIVAL, "express")
    assert _configs(lite.endpoint, basin, ["tenant/000", "tenant/299"]) == dict.fromkeys(
        ["tenant/000", "tenant/299"], kept
    )
    assert len(read_stream(lite.endpoint, basin, "tenant/299")) == 2 * ROWS // STREAMS


def test_a_streams_totals_make_no_random_generator_until_the_latency_sample_is_full() -> None:
    """A task keeps totals per stream it appends to: a stream of few appends carries no 2.5 KB generator
    (4.4 KB of appender state per stream before, 1.5 KB after, measured with tracemalloc over 10,000
    streams); past the sample, the reservoir still keeps `latency_sample` latencies."""
    ack = AppendAck(start=StreamPosition(0, 0), end=StreamPosition(1, 0), tail=StreamPosition(1, 0))
    totals = StreamTotals(latency_sample=4)
    for i in range(4):
        totals.acked(1, 10, ack, float(i))
    assert totals.rng is None
    for i in range(100):
        totals.acked(1, 10, ack, 100.0 + i)
    assert totals.rng is not None
    assert len(totals.latencies) == 4
    assert totals.appends == 104
