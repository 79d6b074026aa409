"""Unary appends started in one turn of the event loop leave in one socket write (`sdk.post_unary`), and
a failed write fails them at once; against the lite server, over the SDK's own connection."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pyarrow as pa
import s2_sdk
from s2_sdk import AppendAck, S2ClientError

from s2_sink._transport import sdk
from s2_sink._transport.append_session import append_once, basin_transport
from s2_sink._wire.append.proto import encode_append_inputs
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.integration._s2read import read_stream

STREAMS = 16
ROWS = 10

_HEADERS, _DATA = 1, 0  # HTTP/2 frame types (RFC 9113 section 6)


def _message() -> bytes:
    bodies = pa.array([f"row {i}".encode() for i in range(ROWS)], pa.binary())
    return encode_append_inputs(bodies, None, None, [0, ROWS], fencing_token=None)[0]


def _request_writes(conn: Any) -> list[int]:
    """Counts, from now on, the socket writes of `conn` that start with a request's HEADERS or DATA frame
    (the connection's other writes, window updates and acks of settings, are not the requests')."""
    writes: list[int] = []
    write: Callable[[bytes], None] = conn._writer.write

    def counting(data: bytes) -> None:
        if len(data) >= 9 and data[3] in (_HEADERS, _DATA):
            writes.append(len(data))
        write(data)

    conn._writer.write = counting
    return writes


async def _streams(client: s2_sdk.S2, basin: str) -> tuple[Any, Any, list[str]]:
    """The test's streams, created (which warms the client's one connection); its transport and connection."""
    names = [f"corked/{i:02d}" for i in range(STREAMS)]
    b = client.basin(basin)
    for name in names:
        await b.create_stream(name)
    transport = basin_transport(client, basin)
    (conn,) = list(sdk.pooled_connections(transport))
    return transport, conn, names


def test_unary_appends_started_together_leave_in_one_socket_write(lite: LiteServer) -> None:
    """16 streams' unary appends started in one turn: one socket write carries their 16 HEADERS and 16 DATA
    frames (before, 32 writes: a flushed HEADERS frame and a DATA frame each), and each lands once."""
    basin = fresh_basin(lite.endpoint)
    message = _message()

    async def main() -> tuple[list[int], list[AppendAck]]:
        endpoints = s2_sdk.Endpoints(account=lite.endpoint, basin=lite.endpoint)
        async with s2_sdk.S2("test", endpoints=endpoints) as client:
            transport, conn, names = await _streams(client, basin)
            writes = _request_writes(conn)
            acks = await asyncio.gather(*(append_once(transport, n, message, ROWS) for n in names))
            return writes, acks

    writes, acks = asyncio.run(main())
    assert len(writes) == 1, f"{len(writes)} socket writes for {STREAMS} unary appends"
    assert [(a.start.seq_num, a.end.seq_num) for a in acks] == [(0, ROWS)] * STREAMS
    assert [r.body for r in read_stream(lite.endpoint, basin, "corked/07")] == [
        f"row {i}".encode() for i in range(ROWS)
    ]


def test_a_failed_corked_write_fails_its_appends_at_once(lite: LiteServer) -> None:
    """The connection dies between the appends' frames being queued and their write: each append fails at
    once with the transport's error as its cause (as a failed write of ``unary_request`` fails it), not
    after the request timeout, and nothing landed."""
    basin = fresh_basin(lite.endpoint)
    message = _message()

    async def main() -> list[BaseException | AppendAck]:
        endpoints = s2_sdk.Endpoints(account=lite.endpoint, basin=lite.endpoint)
        timeout = s2_sdk.Timeout(request=timedelta(seconds=60))
        async with s2_sdk.S2("test", endpoints=endpoints, timeout=timeout) as client:
            transport, conn, names = await _streams(client, basin)
            tickets = [append_once(transport, n, message, ROWS) for n in names]
            await asyncio.sleep(0)  # the appends queue their frames; their write is the next turn's
            conn._send_dead = True  # as a socket write that failed marks it
            return await asyncio.wait_for(asyncio.gather(*tickets, return_exceptions=True), timeout=10)

    outcomes = asyncio.run(main())
    assert all(isinstance(o, S2ClientError) for o in outcomes), outcomes
    assert all(isinstance(o.__cause__, sdk.TransportError) for o in outcomes if isinstance(o, BaseException))
    assert read_stream(lite.endpoint, basin, "corked/03") == []
