"""``LiteServer(stats=True)`` counts requests by kind and records appended and served, per stream."""

from __future__ import annotations

import pytest
from s2_sdk import AppendInput, ReadLimit, Record, SeqNum

from s2_sink.lite import LiteServer
from s2_sink.lite._stats import request_kind
from s2_sink.testing import fresh_basin
from tests.faults._support import client, run


def test_counts_appends_reads_and_tails_per_stream() -> None:
    """Two unary appends of 3 and 2 records, one tail check and two reads (of 5 and of 2 records) on stream
    ``a`` are counted as such; nothing is counted for ``b``; a reset starts from zero."""
    with LiteServer(stats=True) as srv:
        assert srv.stats is not None
        basin = fresh_basin(srv.endpoint)

        async def go() -> None:
            async with client(srv.endpoint) as s2:
                st = s2.basin(basin).stream("a")
                await st.append(AppendInput(records=[Record(body=b"x")] * 3))
                await st.append(AppendInput(records=[Record(body=b"y")] * 2))
                await st.check_tail()
                await st.read(start=SeqNum(0), limit=ReadLimit(count=10))
                await st.read(start=SeqNum(3), limit=ReadLimit(count=10))

        before = srv.stats.snapshot()
        run(go())
        delta = srv.stats.snapshot() - before
        assert delta.requests[("append", "a")] == 2
        assert delta.requests[("check_tail", "a")] == 1
        assert delta.requests[("read", "a")] == 2
        assert delta.records_appended == {"a": 5}
        assert delta.records_read == {"a": 7}
        assert not any(stream == "b" for _, stream in delta.requests)
        srv.stats.reset()
        assert srv.stats.snapshot().requests == {}


def test_session_appends_count_each_input() -> None:
    """An append session counts once as a session and once per AppendInput it carries."""
    with LiteServer(stats=True) as srv:
        assert srv.stats is not None
        basin = fresh_basin(srv.endpoint)

        async def go() -> None:
            async with client(srv.endpoint) as s2:
                st = s2.basin(basin).stream("s")
                async with st.append_session() as session:
                    tickets = [
                        await session.submit(AppendInput(records=[Record(body=b"z")])) for _ in range(4)
                    ]
                    for ticket in tickets:
                        await ticket

        run(go())
        snap = srv.stats.snapshot()
        assert snap.requests[("append_session", "s")] == 1
        assert snap.requests[("session_append", "s")] == 4
        assert snap.records_appended == {"s": 4}


def test_request_kinds() -> None:
    """Paths and content types map to the kinds the module names."""
    assert request_kind("GET", "/v1/streams/a/records/tail", "", "") == "check_tail"
    assert request_kind("POST", "/v1/streams/a/records", "application/x-protobuf", "") == "append"
    assert request_kind("POST", "/v1/streams/a/records", "s2s/proto", "s2s/proto") == "append_session"
    assert request_kind("GET", "/v1/streams/a/records", "", "application/x-protobuf") == "read"
    assert request_kind("GET", "/v1/streams/a/records", "s2s/proto", "") == "read_session"
    assert request_kind("GET", "/v1/streams/a/records", "", "text/event-stream") == "read_session"
    assert request_kind("PUT", "/v1/basins/b", "", "") == "control"
    assert request_kind("GET", "/v1/streams", "", "") == "control"


def test_stats_need_an_in_process_server() -> None:
    """A subprocess server's counters would live in another process: refused at construction."""
    with pytest.raises(ValueError, match="in-process"):
        LiteServer(stats=True, subprocess=True)
