"""The in-memory S2's answer to the bulk append session (`tests.sim._memory_s2.AppendSessionResponse`),
driven by the product's own `BulkAppendSession` outside any schedule (every step goes through): acks in
order with the lite server's positions, the first failure a terminal frame the SDK maps to its own error
(nothing after it applied), a missing stream a 404 before any input."""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from s2_sdk import AppendInput, FencingTokenMismatchError, Record, S2ClientError, S2ServerError
from s2_sdk._exceptions import ConnectionClosedError, ProtocolError
from s2_sdk._generated.s2.v1 import s2_pb2 as pb
from s2_sdk._mappers import append_input_to_proto

from s2_sink._transport.append_session import BulkAppendSession, SessionClosedError, basin_transport
from tests.sim._connection import MemoryConnection
from tests.sim._memory_s2 import MemoryS2, MemoryService
from tests.sim._scheduler import Scheduler

if TYPE_CHECKING:
    from _typeshed import SupportsLenAndGetItem

BASIN = "memory-basin"
T = TypeVar("T")


def _message(*bodies: bytes, token: str | None = None) -> bytes:
    records = [Record(body) for body in bodies]
    message: bytes = append_input_to_proto(
        AppendInput(records=records, fencing_token=token)
    ).SerializeToString()
    return message


def _service(*streams: str) -> MemoryService:
    service = MemoryService(Scheduler(0), BASIN)
    for name in streams:
        service.store.create_stream(BASIN, name, None)
    return service


def _bodies(service: MemoryService, stream: str) -> list[bytes]:
    raw = service.store.stream(BASIN, stream).collect(0, 1 << 30, 1 << 62, None).records
    return [pb.SequencedRecord.FromString(r).body for r in raw]


def test_messages_are_sequenced_and_acknowledged_in_order() -> None:
    service = _service("s")

    async def main() -> list[tuple[int, int]]:
        transport = basin_transport(MemoryS2(service), BASIN)  # type: ignore[arg-type]
        session = BulkAppendSession(transport, "s")
        tickets = [
            session.submit(_message(b"a", b"b"), 2),
            session.submit(_message(b"c"), 1),
            session.submit(_message(b"d", b"e", b"f"), 3),
        ]
        acks = await asyncio.gather(*tickets)
        await session.close()
        return [(ack.start.seq_num, ack.end.seq_num) for ack in acks]

    assert asyncio.run(main()) == [(0, 2), (2, 3), (3, 6)]
    assert _bodies(service, "s") == [b"a", b"b", b"c", b"d", b"e", b"f"]


def test_a_refused_message_ends_the_session_and_nothing_after_it_is_applied() -> None:
    service = _service("s")
    fence = AppendInput(records=[Record(b"tok", [(b"", b"fence")])])
    service.apply_append("s", fence)

    async def main() -> tuple[BaseException | None, BaseException | None, BaseException | None]:
        transport = basin_transport(MemoryS2(service), BASIN)  # type: ignore[arg-type]
        session = BulkAppendSession(transport, "s")
        first = session.submit(_message(b"a", token="tok"), 1)
        refused = session.submit(_message(b"b", token="other"), 1)
        after = session.submit(_message(b"c", token="tok"), 1)
        results = await asyncio.gather(first, refused, after, return_exceptions=True)
        with pytest.raises(SessionClosedError):
            session.submit(_message(b"d", token="tok"), 1)
        return tuple(r if isinstance(r, BaseException) else None for r in results)  # type: ignore[return-value]

    ok, refused, after = asyncio.run(main())
    assert ok is None
    assert isinstance(refused, FencingTokenMismatchError)
    assert refused.expected_fencing_token == "tok"
    assert refused is after  # the session's error fails every later ticket
    assert _bodies(service, "s") == [b"tok", b"a"]


def test_a_session_to_a_missing_stream_is_refused_with_404() -> None:
    service = _service()

    async def main() -> object:
        transport = basin_transport(MemoryS2(service), BASIN)  # type: ignore[arg-type]
        session = BulkAppendSession(transport, "nope")
        ticket = session.submit(_message(b"a"), 1)
        return (await asyncio.gather(ticket, return_exceptions=True))[0]

    err = asyncio.run(main())
    assert isinstance(err, S2ServerError)
    assert err.status_code == 404


class _Draws(random.Random):
    """Draws given in advance (what a connection drop decides), then the test fails if it asks for more."""

    def __init__(self, *draws: float) -> None:
        super().__init__(0)
        self._draws = list(draws)

    def random(self) -> float:
        return self._draws.pop(0)

    def choice(self, seq: SupportsLenAndGetItem[T]) -> T:
        return seq[int(self.random() * len(seq))]


def _cause(ticket: asyncio.Future[Any]) -> BaseException | None:
    err = ticket.exception()
    assert isinstance(err, S2ClientError), err
    return err.__cause__


def test_a_reset_connection_ends_every_session_on_it_with_the_sdks_error() -> None:
    """Two sessions of one client share its HTTP/2 connection; when it is reset, both end with the
    SDK's ``ConnectionClosedError`` (as an `S2ClientError`, as the SDK's own session reports it), nothing
    sent after the drop is applied, and the client's next session opens on a fresh connection."""
    service = _service("a", "b")

    async def main() -> tuple[list[asyncio.Future[Any]], MemoryConnection, MemoryConnection]:
        client = MemoryS2(service)
        transport = basin_transport(client, BASIN)  # type: ignore[arg-type]
        first, second = BulkAppendSession(transport, "a"), BulkAppendSession(transport, "b")
        await asyncio.gather(first.submit(_message(b"a1"), 1), second.submit(_message(b"b1"), 1))
        shared = client.checkout()
        late = [first.submit(_message(b"a2"), 1), second.submit(_message(b"b2"), 1)]
        ended, line = shared.drop(_Draws(0.9))  # a reset, before the server got the late messages
        assert ended == 2, line
        await asyncio.gather(*late, return_exceptions=True)
        fresh = BulkAppendSession(transport, "a")
        await fresh.submit(_message(b"a3"), 1)
        await fresh.close()
        return late, shared, client.checkout()

    late, shared, after = asyncio.run(main())
    for ticket in late:
        cause = _cause(ticket)
        assert isinstance(cause, ConnectionClosedError)
        assert str(cause) == "Connection closed by remote"
    assert after is not shared
    assert _bodies(service, "a") == [b"a1", b"a3"]
    assert _bodies(service, "b") == [b"b1"]


def test_a_goaway_ends_the_streams_above_its_last_stream_id_and_the_others_go_on() -> None:
    """A GOAWAY fails only the streams the server never processed (above its ``last_stream_id``) with the
    SDK's ``ProtocolError``; a stream at or below it goes on and its appends are acknowledged."""
    service = _service("a", "b")

    async def main() -> tuple[BaseException | None, int]:
        client = MemoryS2(service)
        transport = basin_transport(client, BASIN)  # type: ignore[arg-type]
        older = BulkAppendSession(transport, "a")
        await older.submit(_message(b"a1"), 1)  # stream 1, processed
        newer = BulkAppendSession(transport, "b")
        await asyncio.sleep(0)  # its request is open (stream 3), nothing of it sent yet
        ended, line = client.checkout().drop(_Draws(0.1, 0.0))  # a GOAWAY, last_stream_id the first of 1, 3
        assert ended == 1, line
        refused = newer.submit(_message(b"b1"), 1)
        await asyncio.gather(refused, return_exceptions=True)
        ack = await older.submit(_message(b"a2"), 1)
        await older.close()
        return _cause(refused), ack.end.seq_num

    cause, end = asyncio.run(main())
    assert isinstance(cause, ProtocolError)
    assert str(cause) == "GOAWAY received: error_code=0, last_stream_id=1"
    assert end == 2
    assert _bodies(service, "a") == [b"a1", b"a2"]
    assert _bodies(service, "b") == []
