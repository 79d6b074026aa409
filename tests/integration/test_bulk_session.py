"""The pre-encoded S2S append session against the lite server: what it appends, the official SDK reads
back record for record; acks match appends; failures arrive as the SDK's own error types."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest
from s2_sdk import (
    S2,
    AppendInput,
    CommandRecord,
    Compression,
    Endpoints,
    FencingTokenMismatchError,
    ReadLimit,
    Record,
    Retry,
    S2ServerError,
    SeqNum,
    Timeout,
)
from s2_sdk._client import Connection

from s2_sink._transport.append_session import BulkAppendSession, SessionClosedError, basin_transport
from s2_sink._wire.append.proto import encode_append_inputs
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin

HEADER_TYPE = pa.list_(pa.struct([pa.field("name", pa.binary()), pa.field("value", pa.binary())]))


def sdk(lite: LiteServer, compression: Compression = Compression.NONE) -> S2:
    return S2(
        "test",
        endpoints=Endpoints(account=lite.endpoint, basin=lite.endpoint),
        timeout=Timeout(request=timedelta(seconds=10), connection=timedelta(seconds=3)),
        retry=Retry(max_attempts=1),
        compression=compression,
    )


def rows(n: int) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Bodies of varied sizes (some over the 1 KiB compression threshold, one empty), headers on every
    third row (binary values, non-ASCII names), past timestamps increasing (S2 caps a client timestamp at
    the arrival time and keeps them monotonic: a null one would be the arrival time, ahead of the rest)."""
    bodies = [(f"{i}:".encode() + bytes([i % 251]) * (i * 37 % 3000)) if i != 5 else b"" for i in range(n)]
    headers = [
        [{"name": "ключ".encode(), "value": bytes([0, i % 256])}, {"name": b"@action", "value": b"u"}]
        if i % 3 == 0
        else None
        for i in range(n)
    ]
    stamps = [1_700_000_000_000 + i for i in range(n)]
    return pa.array(bodies, pa.binary()), pa.array(headers, HEADER_TYPE), pa.array(stamps, pa.int64())


async def read_all(client: S2, basin: str, stream: str) -> list[Record]:
    batch = await client.basin(basin).stream(stream).read(start=SeqNum(0), limit=ReadLimit(count=1000))
    return [Record(r.body, list(r.headers), r.timestamp) for r in batch.records]


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.ZSTD, Compression.GZIP])
def test_pre_encoded_appends_read_back_record_for_record(lite: LiteServer, compression: Compression) -> None:
    """Five chunks encoded in bulk, pipelined on one session: acks in order with the chunks' record
    counts; the SDK reads back exactly the records, headers and timestamps of the frame."""
    basin = fresh_basin(lite.endpoint)
    body, headers, stamps = rows(40)
    bounds = [0, 1, 9, 10, 31, 40]
    messages = encode_append_inputs(body, headers, stamps, bounds, fencing_token=None)

    async def go() -> tuple[list[tuple[int, int]], list[Record]]:
        client = sdk(lite, compression)
        async with client:
            session = BulkAppendSession(basin_transport(client, basin), "s", compression)
            tickets = [
                session.submit(m, hi - lo) for m, lo, hi in zip(messages, bounds, bounds[1:], strict=False)
            ]
            acks = [await t for t in tickets]
            await session.close()
            return [(a.start.seq_num, a.end.seq_num) for a in acks], await read_all(client, basin, "s")

    acks, got = asyncio.run(go())
    assert acks == [(0, 1), (1, 9), (9, 10), (10, 31), (31, 40)]
    expected = [
        (b, [(h["name"], h["value"]) for h in (hs or [])], t)
        for b, hs, t in zip(body.to_pylist(), headers.to_pylist(), stamps.to_pylist(), strict=True)
    ]
    assert [(r.body, [tuple(h) for h in r.headers], r.timestamp) for r in got] == expected


def test_a_wrong_fencing_token_fails_the_ticket_with_the_sdk_error(lite: LiteServer) -> None:
    """A 412 from the fence arrives as the SDK's FencingTokenMismatchError, naming the expected token;
    the session then takes no more appends, and the right token goes through on a fresh one."""
    basin = fresh_basin(lite.endpoint)
    body, headers, stamps = rows(3)

    async def go() -> tuple[BaseException | None, str | None, bool, int]:
        client = sdk(lite)
        async with client:
            await client.basin(basin).stream("f").append(AppendInput(records=[CommandRecord.fence("tok-a")]))
            transport = basin_transport(client, basin)
            session = BulkAppendSession(transport, "f")
            [wrong] = encode_append_inputs(body, headers, stamps, [0, 3], fencing_token="tok-b")
            with pytest.raises(FencingTokenMismatchError) as info:
                await session.submit(wrong, 3)
            with pytest.raises(FencingTokenMismatchError):
                await session.close()
            closed = not session.accepting
            with pytest.raises(SessionClosedError):
                session.submit(wrong, 3)
            fresh = BulkAppendSession(transport, "f")
            [right] = encode_append_inputs(body, headers, stamps, [0, 3], fencing_token="tok-a")
            ack = await fresh.submit(right, 3)
            await fresh.close()
            return info.value, info.value.expected_fencing_token, closed, ack.end.seq_num

    _, expected, closed, end = asyncio.run(go())
    assert expected == "tok-a"
    assert closed
    assert end == 4  # the fence record, then the three records


def test_a_missing_stream_is_the_sdk_404(lite: LiteServer) -> None:
    """Without create_stream_on_append, the non-200 answer becomes the SDK's S2ServerError (404)."""
    basin = fresh_basin(lite.endpoint, create_stream_on_append=False)
    body, headers, stamps = rows(2)
    [message] = encode_append_inputs(body, headers, stamps, [0, 2], fencing_token=None)

    async def go() -> S2ServerError:
        client = sdk(lite)
        async with client:
            session = BulkAppendSession(basin_transport(client, basin), "missing")
            with pytest.raises(S2ServerError) as info:
                await session.submit(message, 2)
            return info.value

    assert asyncio.run(go()).status_code == 404


def test_an_ack_for_another_record_count_fails_the_session(lite: LiteServer) -> None:
    """Acks are checked against the record count of the append they are matched to."""
    basin = fresh_basin(lite.endpoint)
    body, headers, stamps = rows(4)
    [message] = encode_append_inputs(body, headers, stamps, [0, 4], fencing_token=None)

    async def go() -> None:
        client = sdk(lite)
        async with client:
            session = BulkAppendSession(basin_transport(client, basin), "c")
            with pytest.raises(Exception, match="4 records acknowledged for an append of 3"):
                await session.submit(message, 3)

    asyncio.run(go())


def test_messages_submitted_together_go_out_as_one_write(
    lite: LiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five messages submitted in one turn of the loop reach the SDK's connection as one write (one
    HTTP/2 DATA frame under the lite server's frame size); a close right after them still sends them
    all, and each ack is matched to its own message."""
    writes: list[int] = []
    real_send = Connection.send_data

    async def counting_send(self: Connection, stream_id: int, data: bytes, *args: Any, **kwargs: Any) -> None:
        writes.append(len(data))
        await real_send(self, stream_id, data, *args, **kwargs)

    monkeypatch.setattr(Connection, "send_data", counting_send)
    basin = fresh_basin(lite.endpoint)
    body, headers, stamps = rows(40)
    bounds = [0, 1, 9, 10, 31, 40]
    messages = encode_append_inputs(body, headers, stamps, bounds, fencing_token=None)

    async def go() -> tuple[list[tuple[int, int]], int]:
        client = sdk(lite)
        async with client:
            session = BulkAppendSession(basin_transport(client, basin), "g")
            tickets = [
                session.submit(m, hi - lo) for m, lo, hi in zip(messages, bounds, bounds[1:], strict=False)
            ]
            await session.close()
            acks = [await t for t in tickets]
            return [(a.start.seq_num, a.end.seq_num) for a in acks], len(await read_all(client, basin, "g"))

    acks, read = asyncio.run(go())
    assert acks == [(0, 1), (1, 9), (9, 10), (10, 31), (31, 40)]
    assert read == 40
    assert writes == [sum(len(m) + 4 for m in messages)]  # each framed: 3-byte length, flag byte
