"""How the appender waits for one ack: the ticket is never cancelled, a late ack is still there to take."""

from __future__ import annotations

import asyncio

from s2_sdk import AppendAck, StreamPosition

from s2_sink._write.task.tickets import settled as _settled

ACK = AppendAck(StreamPosition(0, 0), StreamPosition(3, 0), StreamPosition(3, 0))


def test_a_done_ticket_is_settled_at_once() -> None:
    """An ack already in is taken without waiting (and without a timer)."""

    async def go() -> bool:
        ticket: asyncio.Future[AppendAck] = asyncio.get_running_loop().create_future()
        ticket.set_result(ACK)
        return await _settled(ticket, 0.0)

    assert asyncio.run(go())


def test_an_ack_arriving_while_waiting_wakes_the_waiter() -> None:
    """The waiter returns as soon as the ack arrives, long before its deadline."""

    async def go() -> tuple[bool, float]:
        loop = asyncio.get_running_loop()
        ticket: asyncio.Future[AppendAck] = loop.create_future()
        loop.call_later(0.01, ticket.set_result, ACK)
        started = loop.time()
        settled = await _settled(ticket, 30.0)
        return settled, loop.time() - started

    settled, waited = asyncio.run(go())
    assert settled
    assert waited < 5.0


def test_the_deadline_passes_without_cancelling_the_ticket() -> None:
    """Past the deadline the wait gives up, the ticket stays pending, and a later ack still lands on it
    (the watchdog drops the session; the ack must not be lost to a cancellation)."""

    async def go() -> tuple[bool, bool, AppendAck]:
        ticket: asyncio.Future[AppendAck] = asyncio.get_running_loop().create_future()
        settled = await _settled(ticket, 0.01)
        pending = not ticket.done()
        ticket.set_result(ACK)
        return settled, pending, await ticket

    settled, pending, ack = asyncio.run(go())
    assert not settled
    assert pending
    assert ack == ACK


def test_a_cancelled_waiter_leaves_the_ticket_alone() -> None:
    """Cancelling the task that waits (a task being torn down) does not cancel the ticket."""

    async def go() -> bool:
        ticket: asyncio.Future[AppendAck] = asyncio.get_running_loop().create_future()
        waiter = asyncio.ensure_future(_settled(ticket, 30.0))
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        return ticket.cancelled()

    assert not asyncio.run(go())
