"""Appends: unary appends and S2S append sessions, both committed through one ``Appender``.

Append sessions are handled synchronously as DATA arrives: each frame is sequenced at once, and its ack is
queued in input order and released when the batch is durable. The first failure poisons the session: acks
before it are still sent, then one terminal frame, and nothing after it is applied.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from s2_sink.lite import _faults
from s2_sink.lite._api_errors import ApiError, bad, conflict
from s2_sink.lite._append_input import ParsedInput
from s2_sink.lite._batch import Batch
from s2_sink.lite._clock import Clock
from s2_sink.lite._durability import DurableLog, encode_append
from s2_sink.lite._faults import Faults
from s2_sink.lite._framing import FrameReader, encode_frame, encode_terminal
from s2_sink.lite._request import Request
from s2_sink.lite._stats import RequestStats
from s2_sink.lite._stream import Stream
from s2_sink.lite._throttle import Throttle
from s2_sink.lite._wire import append_ack

__all__ = ["AppendSession", "Appender", "ConnectionDropped"]

S2S = [("content-type", "s2s/proto")]


class ConnectionDropped(Exception):
    """The connection was cut by a fault hook: there is no response to send."""


class Appender:
    """What every append goes through: the clock, the throttle (if on), the durable log (if any) and the fault
    hooks."""

    __slots__ = ("clock", "faults", "log", "stats", "throttle")

    def __init__(
        self,
        log: DurableLog | None,
        faults: Faults,
        clock: Clock,
        throttle: Throttle | None = None,
        stats: RequestStats | None = None,
    ) -> None:
        self.log = log
        self.faults = faults
        self.clock = clock
        self.throttle = throttle
        self.stats = stats

    def sequence(
        self, req: Request, stream: Stream, payload: bytes, parsed: ParsedInput | None = None
    ) -> Batch:
        """Admit (throttling) and sequence one encoded AppendInput (`parsed` already, or not); raises ApiError
        without applying it."""
        if self.throttle is not None:
            self.throttle.admit(req.conn, stream, len(payload))
        batch = stream.sequence(payload if parsed is None else parsed, self.clock.now_ms())
        if self.stats is not None:
            self.stats.appended(stream.name, batch.end - batch.start)
        return batch

    def commit(self, stream: Stream, batch: Batch, on_durable: Callable[[], None]) -> None:
        """Make a batch durable (log + fsync when there is a data dir), then visible, then call back."""

        def durable() -> None:
            stream.make_visible(batch.end, batch.last_ts)
            on_durable()

        if self.log is None:
            durable()
        else:
            self.log.write(encode_append(stream, batch))
            self.log.commit(durable)

    async def unary(
        self, req: Request, stream: Stream, payload: bytes, parsed: ParsedInput | None = None
    ) -> bytes:
        """Append one encoded AppendInput; returns the encoded ack once durable."""
        action = _faults.PASS
        faults = self.faults
        if faults.active:
            action, status = faults.on_append()
            if action == _faults.FAIL:
                raise ApiError(
                    status, "unavailable" if status == 503 else "other", "injected fault: append failed"
                )
            if action == _faults.DROP_BEFORE:
                req.abort_connection()
                raise ConnectionDropped
        batch = self.sequence(req, stream, payload, parsed)
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def resolve() -> None:
            if not done.done():
                done.set_result(None)

        self.commit(stream, batch, resolve)
        await done
        if action == _faults.DROP_AFTER_DURABLE:
            req.abort_connection()
            raise ConnectionDropped
        delay = faults.ack_delay() if faults.active else 0.0
        if delay:
            await asyncio.sleep(delay)
        return ack_for(stream, batch)


def ack_for(stream: Stream, batch: Batch) -> bytes:
    """The encoded AppendAck of a durable batch."""
    return append_ack((batch.start, batch.ts0), (batch.end, batch.last_ts), stream.tail())


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

    def __init__(self, appender: Appender, req: Request, stream: Stream) -> None:
        self.appender = appender
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
        if self.appender.stats is not None:
            self.appender.stats.request("session_append", stream.name)
        if stream.deleted:
            # S2's streamer (streamer.rs): once a deletion's terminal trim is sequenced an append is refused
            # with 409 (``handle_append``); once it is durable the streamer is gone and what an open session
            # sends next cannot be admitted (``append_permit``: 503 ``unavailable``). Nothing is applied.
            if stream.visible_seq < stream.next_seq:
                self.fail(conflict("stream_deletion_pending", "stream deletion pending"))
            else:
                self.fail(ApiError(503, "unavailable", "streamer missing in action"))
            return
        action = _faults.PASS
        faults = self.appender.faults
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
            batch = self.appender.sequence(self.req, stream, payload)
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

        self.appender.commit(stream, batch, durable)

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
