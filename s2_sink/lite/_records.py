"""The records API: unary append/read and S2S append/read sessions.

Append sessions are handled synchronously as DATA arrives: each frame is sequenced at once, and its ack is
queued in input order and released when the batch is durable. The first failure poisons the session: acks
before it are still sent, then one terminal frame, and nothing after it is applied.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

from s2_sink.lite import _faults
from s2_sink.lite._append_input import ONE_MIB
from s2_sink.lite._batch import Batch
from s2_sink.lite._clock import now_ms
from s2_sink.lite._durability import encode_append
from s2_sink.lite._errors import ApiError, bad, invalid, not_found, read_unwritten
from s2_sink.lite._framing import FrameReader, encode_frame, encode_terminal
from s2_sink.lite._http2 import Request
from s2_sink.lite._read_out import ReadOut
from s2_sink.lite._stream import Stream
from s2_sink.lite._wire import append_ack, read_batch

if TYPE_CHECKING:
    from s2_sink.lite._api import LiteApp

__all__ = ["AppendSession", "ConnectionDropped", "ReadParams", "read_session", "unary_append", "unary_read"]

log = logging.getLogger(__name__)

S2S = [("content-type", "s2s/proto")]
_MAX_UNARY_WAIT = 60


class ConnectionDropped(Exception):
    """The connection was cut by a fault hook: there is no response to send."""


@dataclass(slots=True)
class ReadParams:
    """Query parameters of a read."""

    seq_num: int | None = None
    timestamp: int | None = None
    tail_offset: int | None = None
    count: int | None = None
    nbytes: int | None = None
    until: int | None = None
    clamp: bool = False
    wait: int | None = None

    @property
    def bounded(self) -> bool:
        """A count, bytes or until bound is set."""
        return self.count is not None or self.nbytes is not None or self.until is not None

    @classmethod
    def parse(cls, query: str) -> ReadParams:
        """Parse the query string; 400 ``bad_query`` on junk, 422 on contradictory starts."""
        p = cls()
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key == "clamp":
                if value not in ("true", "false", ""):
                    raise bad("bad_query", f"clamp must be true or false, got {value!r}")
                p.clamp = value == "true"
                continue
            attr = {"bytes": "nbytes"}.get(key, key)
            if attr not in ("seq_num", "timestamp", "tail_offset", "count", "nbytes", "until", "wait"):
                continue
            try:
                n = int(value)
            except ValueError as exc:
                raise bad("bad_query", f"{key} must be a non-negative integer, got {value!r}") from exc
            if n < 0:
                raise bad("bad_query", f"{key} must be a non-negative integer, got {value!r}")
            setattr(p, attr, n)
        starts = [x for x in (p.seq_num, p.timestamp, p.tail_offset) if x is not None]
        if len(starts) > 1:
            raise invalid("give at most one of seq_num, timestamp, tail_offset")
        # A zero limit means no limit.
        if p.count == 0:
            p.count = None
        if p.nbytes == 0:
            p.nbytes = None
        if p.until is not None and p.timestamp is not None and p.timestamp >= p.until:
            raise invalid(f"start timestamp {p.timestamp} must be less than until {p.until}")
        return p

    def resolve_start(self, stream: Stream, can_follow: bool) -> int:
        """The first seq_num to read, applying the 416 rules."""
        tail_seq, tail_ts = stream.tail()
        if self.seq_num is not None:
            start = self.seq_num
            if start > tail_seq:
                if not self.clamp:
                    raise read_unwritten(tail_seq, tail_ts)
                start = tail_seq
        elif self.timestamp is not None:
            if self.timestamp > tail_ts and not self.clamp:
                raise read_unwritten(tail_seq, tail_ts)
            start = stream.seq_for_timestamp(self.timestamp)
        elif self.tail_offset is not None:
            start = max(tail_seq - self.tail_offset, 0)
        else:
            start = tail_seq
        start = max(start, stream.first_seq()) if start < tail_seq else start
        if start >= tail_seq and not can_follow:
            raise read_unwritten(tail_seq, tail_ts)
        return start


# -- appends -------------------------------------------------------------------------------------------------


def commit_batch(app: LiteApp, stream: Stream, batch: Batch, on_durable: Callable[[], None]) -> None:
    """Make a sequenced batch durable (log + fsync when there is a data dir), then visible, then call back."""

    def durable() -> None:
        stream.make_visible(batch.end, batch.last_ts)
        on_durable()

    if app.log is None:
        durable()
    else:
        app.log.write(encode_append(stream, batch))
        app.log.commit(durable)


def ack_for(stream: Stream, batch: Batch) -> bytes:
    """The encoded AppendAck of a durable batch."""
    return append_ack((batch.start, batch.ts0), (batch.end, batch.last_ts), stream.tail())


async def unary_append(app: LiteApp, req: Request, stream: Stream, payload: bytes) -> bytes:
    """Append one encoded AppendInput; returns the encoded ack once durable."""
    action = _faults.PASS
    if app.faults.active:
        action, status = app.faults.on_append()
        if action == _faults.FAIL:
            raise ApiError(
                status, "unavailable" if status == 503 else "other", "injected fault: append failed"
            )
        if action == _faults.DROP_BEFORE:
            req.abort_connection()
            raise ConnectionDropped
    batch = stream.sequence(payload, now_ms())
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def resolve() -> None:
        if not done.done():
            done.set_result(None)

    commit_batch(app, stream, batch, resolve)
    await done
    if action == _faults.DROP_AFTER_DURABLE:
        req.abort_connection()
        raise ConnectionDropped
    delay = app.faults.ack_delay() if app.faults.active else 0.0
    if delay:
        await asyncio.sleep(delay)
    return ack_for(stream, batch)


class _Slot:
    """One input's place in the ack queue: an ack, a terminal frame, or a fault-injected connection drop."""

    __slots__ = ("frame", "kind", "ready")

    ACK = 0
    TERMINAL = 1
    DROP = 2

    def __init__(self, kind: int, frame: bytes = b"", ready: bool = False) -> None:
        self.kind = kind
        self.frame = frame
        self.ready = ready


class AppendSession:
    """An S2S append session on one request stream."""

    def __init__(self, app: LiteApp, req: Request, stream: Stream) -> None:
        self.app = app
        self.req = req
        self.stream = stream
        self.reader = FrameReader()
        self.pending: deque[_Slot] = deque()
        self.poisoned = False
        self.input_ended = False
        req.on_data = self.on_data
        req.on_end = self.on_end
        req.start(200, S2S)

    def on_data(self, data: bytes) -> None:
        """Sequence every complete frame in this chunk."""
        if self.poisoned or self.req.closed:
            return
        payloads, err = self.reader.feed(data)
        for payload in payloads:
            self.on_input(payload)
            if self.poisoned:
                return
        if err is not None:
            self.fail(err)

    def on_input(self, payload: bytes) -> None:
        """One AppendInput."""
        stream = self.stream
        if stream.deleted:
            self.fail(not_found("stream_not_found", f"stream {stream.name!r} was deleted"))
            return
        action = _faults.PASS
        faults = self.app.faults
        if faults.active:
            action, status = faults.on_append()
            if action == _faults.FAIL:
                self.fail(ApiError(status, "unavailable" if status == 503 else "other", "injected fault"))
                return
            if action == _faults.DROP_BEFORE:
                # Drop only after the acks of earlier inputs are out, so nothing but this input is in doubt.
                self.poisoned = True
                self.pending.append(_Slot(_Slot.DROP, ready=True))
                self.flush()
                return
        try:
            batch = stream.sequence(payload, now_ms())
        except ApiError as exc:
            self.fail(exc)
            return
        if action == _faults.DROP_AFTER_DURABLE:
            self.poisoned = True
            slot = _Slot(_Slot.DROP)
        else:
            slot = _Slot(_Slot.ACK)
        self.pending.append(slot)

        def durable() -> None:
            if slot.kind == _Slot.ACK:
                slot.frame = encode_frame(ack_for(stream, batch))
                delay = faults.ack_delay() if faults.active else 0.0
                if delay:
                    asyncio.get_running_loop().call_later(delay, self._release, slot)
                    return
            slot.ready = True
            self.flush()

        commit_batch(self.app, stream, batch, durable)

    def _release(self, slot: _Slot) -> None:
        slot.ready = True
        self.flush()

    def fail(self, exc: ApiError) -> None:
        """Poison the session: a terminal frame follows the acks of earlier inputs."""
        if self.poisoned:
            return
        self.poisoned = True
        self.pending.append(_Slot(_Slot.TERMINAL, encode_terminal(exc), ready=True))
        self.flush()

    def on_end(self) -> None:
        """The client half-closed: finish once every ack is out."""
        self.input_ended = True
        if self.reader.pending and not self.poisoned:
            self.fail(bad("bad_frame", "input ended inside a frame"))
        self.flush()

    def flush(self) -> None:
        """Send ready acks in input order; a terminal frame ends the response, a drop slot the connection."""
        req = self.req
        pending = self.pending
        while pending and pending[0].ready:
            slot = pending.popleft()
            if slot.kind == _Slot.ACK:
                req.send(slot.frame)
                continue
            pending.clear()
            if slot.kind == _Slot.TERMINAL:
                req.send(slot.frame, end=True)
            else:
                req.abort_connection()
            return
        if not pending and self.input_ended and not self.poisoned:
            req.end()


# -- reads ---------------------------------------------------------------------------------------------------


async def _wait_change(stream: Stream, seconds: float | None) -> bool:
    """Wait until the stream's visible tail moves; False on timeout."""
    ev = stream.changed()
    try:
        async with asyncio.timeout(seconds):
            await ev.wait()
    except TimeoutError:
        return False
    return True


async def unary_read(stream: Stream, p: ReadParams) -> bytes:
    """An encoded ReadBatch: at most 1000 records / 1 MiB; ``wait`` long-polls at the tail."""
    wait = min(p.wait or 0, _MAX_UNARY_WAIT)
    start = p.resolve_start(stream, can_follow=wait > 0)
    max_count = min(p.count or 1000, 1000)
    max_bytes = min(p.nbytes or ONE_MIB, ONE_MIB)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        res = stream.collect(start, max_count, max_bytes, p.until)
        if res.count or res.until_reached:
            tail = stream.tail() if res.next_seq >= stream.visible_seq else None
            return read_batch(res.records, tail)
        remaining = deadline - loop.time()
        if remaining <= 0 or stream.deleted:
            return read_batch([], None)
        await _wait_change(stream, remaining)


async def read_session(req: Request, stream: Stream, p: ReadParams, out: ReadOut) -> None:
    """Stream batches until a bound is met, ``wait`` expires, or the client goes away."""
    wait: float | None = p.wait if p.wait is not None else (0 if p.bounded else None)
    can_follow = not p.bounded or bool(p.wait)
    try:
        seq = p.resolve_start(stream, can_follow)
    except ApiError as exc:
        req.respond(exc.status, [("content-type", "application/json")], exc.body())
        return
    req.start(200, [("content-type", out.content_type)])
    remaining_count = p.count
    remaining_bytes = p.nbytes
    total_count = total_bytes = 0
    loop = asyncio.get_running_loop()
    following = False
    last_delivery = loop.time()
    while not req.closed:
        if stream.deleted:
            req.send(
                out.error(not_found("stream_not_found", f"stream {stream.name!r} was deleted")), end=True
            )
            return
        res = stream.collect(
            seq,
            min(remaining_count or 1000, 1000),
            min(remaining_bytes, ONE_MIB) if remaining_bytes is not None else ONE_MIB,
            p.until,
        )
        if res.count:
            caught_up = res.next_seq >= stream.visible_seq
            seq = res.next_seq
            total_count += res.count
            total_bytes += res.nbytes
            tail = stream.tail() if caught_up else None
            req.send(out.batch(res.records, tail, (seq, total_count, total_bytes)))
            last_delivery = loop.time()
            if remaining_count is not None:
                remaining_count -= res.count
            if remaining_bytes is not None:
                remaining_bytes -= res.nbytes
            if remaining_count == 0 or remaining_bytes == 0 or res.until_reached:
                req.end()
                return
            await req.drain()
            if not caught_up:
                continue
            following = True
        elif res.until_reached:
            req.end()
            return
        # At the tail.
        if wait == 0:
            req.end()
            return
        if not following:
            following = True
            req.send(out.heartbeat(stream.tail()))
        heartbeat = random.uniform(5.0, 10.0)
        timeout = heartbeat
        if wait is not None:
            left = last_delivery + wait - loop.time()
            if left <= 0:
                req.end()
                return
            timeout = min(timeout, left)
        if not await _wait_change(stream, timeout):
            if wait is not None and loop.time() >= last_delivery + wait:
                req.end()
                return
            req.send(out.heartbeat(stream.tail()))
