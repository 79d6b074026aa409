"""One task routing its rows to hundreds of streams, against the lite server: each stream's rows of the
task go out as few appends as their size allows (not one per row, however the streams interleave), in
order, over a bounded number of open append sessions."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from s2_sink._transport import sdk
from s2_sink._transport.append_session import BulkAppendSession
from s2_sink._write.plan import WritePlan
from s2_sink._write.task import appender
from s2_sink._write.task.partition_writer import write_partition
from s2_sink.lite import LiteServer
from tests.integration._s2read import read_stream
from tests.unit.test_writer_core import config, ctx, frame, stream_rows

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
    for s in (0, 1, 150, STREAMS - 1):
        got = [int(r.body) for r in read_stream(lite.endpoint, basin, f"tenant/{s:03d}")]
        assert got == list(range(s, ROWS, STREAMS))


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
