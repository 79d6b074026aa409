"""The in-memory S2's answer to the bulk append session (`tests.sim._memory_s2.AppendSessionResponse`),
driven by the product's own `BulkAppendSession` outside any schedule (every step goes through): acks in
order with the lite server's positions, the first failure a terminal frame the SDK maps to its own error
(nothing after it applied), a missing stream a 404 before any input."""

from __future__ import annotations

import asyncio

import pytest
from s2_sdk import AppendInput, FencingTokenMismatchError, Record, S2ServerError
from s2_sdk._generated.s2.v1 import s2_pb2 as pb
from s2_sdk._mappers import append_input_to_proto

from s2_sink._bulk_session import BulkAppendSession, SessionClosedError, basin_transport
from tests.sim._memory_s2 import MemoryS2, MemoryService
from tests.sim._scheduler import Scheduler

BASIN = "memory-basin"


def _message(*bodies: bytes, token: str | None = None) -> bytes:
    records = [Record(body) for body in bodies]
    message: bytes = append_input_to_proto(
        AppendInput(records=records, fencing_token=token)
    ).SerializeToString()
    return message


def _service(*streams: str) -> MemoryService:
    service = MemoryService(Scheduler(0), BASIN)
    for name in streams:
        service.store.ensure_stream(BASIN, name, None)
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
