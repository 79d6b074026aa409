"""One append as a task's appender tracks it (`Chunk`), and what the appender does with its ticket: wait
for it without cancelling it, judge its failure, describe it, close a session."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass

from s2_sdk import AppendAck, Record, S2ServerError

from s2_sink._transport.append_session import BulkAppendSession, SessionClosedError
from s2_sink._wire.append.proto import fencing_token_field
from s2_sink._write.task.frame_records import serialize_records

__all__ = ["Chunk", "cause", "close_bulk", "describe", "forget_acked", "is_acked", "retrieve", "settled"]

log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class Chunk:
    """One append: its records (tagged, if tagging) as SDK records or an ``AppendInput`` without fencing
    token, serialized when first sent, and once sent its ack ticket."""

    stream: str
    index: int
    count: int
    nbytes: int
    records: list[Record] | None = None
    wire: bytes | None = None
    ticket: asyncio.Future[AppendAck] | None = None
    submitted_at: float = 0.0
    last: bool = False
    """No later chunk of its stream follows in this task."""

    def message(self, token: str | None) -> bytes:
        if self.wire is None:
            assert self.records is not None
            self.wire, self.records = serialize_records(self.records), None
        return self.wire + fencing_token_field(token)


async def close_bulk(session: BulkAppendSession, grace_s: float) -> None:
    """Half-close a bulk session and let the server end it (a failed one re-raises its error, which
    was reported already); a timed-out close cancels its runner."""
    try:
        await asyncio.wait_for(session.close(), timeout=grace_s)
    except TimeoutError:
        session.abort()
    except Exception as exc:  # narrowed below: any exception can be what failed the session
        if exc is not session.error:
            raise  # not the session's failure (reported already): a fault of the close itself
        log.debug("closing bulk append session stream=%s: %s", session.stream, type(exc).__name__)


async def settled(ticket: asyncio.Future[AppendAck], within_s: float) -> bool:
    """Whether `ticket` is done within `within_s` seconds, never cancelling it: one loop callback per ack
    where ``asyncio.wait_for(asyncio.shield(ticket))`` takes four."""
    if ticket.done():
        return True
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def wake(_: object = None) -> None:
        if not waiter.done():
            waiter.set_result(None)

    ticket.add_done_callback(wake)
    timer = loop.call_later(within_s, wake)
    try:
        await waiter
    finally:
        timer.cancel()
        ticket.remove_done_callback(wake)
    return ticket.done()


def cause(exc: Exception) -> Exception:
    """The failure to judge: a closed session's cause (what closed it), else `exc`."""
    if isinstance(exc, SessionClosedError) and isinstance(exc.__cause__, Exception):
        return exc.__cause__
    return exc


def retrieve(task: asyncio.Future[str]) -> None:
    """Mark a fence keeper's failure retrieved (the stream's recovery raises it, if it still runs)."""
    if not task.cancelled():
        task.exception()


def is_acked(chunk: Chunk) -> bool:
    t = chunk.ticket
    return t is not None and t.done() and not t.cancelled() and t.exception() is None


def forget_acked(unacked: deque[Chunk]) -> bool:
    """Take the acknowledged chunks off the front of `unacked`; whether there were any."""
    acked = False
    while unacked and is_acked(unacked[0]):
        unacked.popleft()
        acked = True
    return acked


def describe(exc: BaseException) -> str:
    if isinstance(exc, S2ServerError):
        return f"{type(exc).__name__} {exc.status_code} {exc.code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"
