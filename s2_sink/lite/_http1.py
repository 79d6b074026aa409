"""HTTP/1.1 connection plumbing on the pure-Python ``h11`` state machine, for clients without HTTP/2 (curl,
``fetch``, the TypeScript SDK).

One ``H1Protocol`` per TCP connection, one request at a time (keep-alive; pipelined requests wait their turn).
Requests become ``H1Request`` objects with the same interface as HTTP/2's, so every route is shared. Request
bodies may be ``Content-Length`` or chunked; a response body with a known length gets ``Content-Length``,
a streamed one (SSE, sessions) is chunked.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from http import HTTPStatus

import h11

from s2_sink.lite._request import App

__all__ = ["H1Protocol", "H1Request"]

log = logging.getLogger(__name__)

_NO_BODY_STATUSES = (204, 304)
_BAD_REQUEST = b'{"code":"bad_request","message":"malformed HTTP/1.1 request"}'


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:  # a status the standard library does not name (499)
        return b""


class H1Request:
    """One HTTP/1.1 request as received and the response being sent."""

    __slots__ = (
        "body",
        "closed",
        "conn",
        "ended",
        "headers",
        "method",
        "on_data",
        "on_end",
        "on_reset",
        "path",
        "response_done",
        "started",
    )

    def __init__(self, conn: H1Protocol, method: str, path: str, headers: dict[str, str]) -> None:
        self.conn = conn
        self.method = method
        self.path = path
        self.headers = headers
        self.body = bytearray()
        self.ended = False
        self.closed = False
        self.started = False
        self.response_done = False
        self.on_data: Callable[[bytes], None] | None = None
        self.on_end: Callable[[], None] | None = None
        self.on_reset: Callable[[], None] | None = None

    def start(self, status: int, headers: list[tuple[str, str]] | None = None, *, end: bool = False) -> None:
        """Send the response headers (``end`` = no body)."""
        if self.closed or self.started:
            return
        self.started = True
        hdrs = list(headers or [])
        if end and status not in _NO_BODY_STATUSES:
            hdrs.append(("content-length", "0"))
        if not self.conn.send(h11.Response(status_code=status, headers=hdrs, reason=_reason(status))):
            return
        if end:
            self._finish()

    def respond(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        """A complete response."""
        if not body:
            self.start(status, headers, end=True)
            return
        self.start(status, [*headers, ("content-length", str(len(body)))])
        self.send(body, end=True)

    def send(self, data: bytes, *, end: bool = False) -> None:
        """Write response body bytes (a chunk when the length was not announced)."""
        if self.closed or self.response_done:
            return
        if data and not self.conn.send(h11.Data(data=data)):
            return
        if end:
            self._finish()

    def end(self) -> None:
        """End the response."""
        self.send(b"", end=True)

    def _finish(self) -> None:
        self.response_done = True
        if self.conn.send(h11.EndOfMessage()):
            self.conn.response_finished()

    async def drain(self) -> None:
        """Wait until the socket takes more (backpressure for read sessions)."""
        await self.conn.writable()

    def abort_connection(self) -> None:
        """Drop the connection (fault injection), after writing what is queued."""
        self.conn.drop()

    def close(self) -> None:
        """The connection is gone: tell the handler."""
        if self.closed:
            return
        self.closed = True
        cb = self.on_reset
        if cb is not None:
            self.on_reset = None
            cb()


class H1Protocol(asyncio.Protocol):
    """The server side of one HTTP/1.1 connection."""

    def __init__(self, app: App, on_close: Callable[[], None] | None = None) -> None:
        self.app = app
        self.h11 = h11.Connection(h11.SERVER)
        self.transport: asyncio.Transport | None = None
        self.current: H1Request | None = None
        self._on_close = on_close
        self._dropped = False
        self._writable: asyncio.Future[None] | None = None
        self._paused = False
        self._receiving = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    # -- output ----------------------------------------------------------------------------------------------

    def send(self, event: h11.Event) -> bool:
        """Write one h11 event; False (and the connection closed) if it cannot be sent."""
        if self._dropped or self.transport is None or self.transport.is_closing():
            self._close_current()
            return False
        try:
            data = self.h11.send(event)
        except h11.LocalProtocolError as exc:
            log.debug("cannot send %s: %s", type(event).__name__, exc)
            self.abort()
            return False
        if data:
            self.transport.write(data)
        return True

    def response_finished(self) -> None:
        """Our response is complete: start on the next request, or close if the connection must close."""
        if self.h11.our_state is h11.MUST_CLOSE:
            if self.transport is not None:
                self.transport.close()
            return
        self._next_cycle()

    def _next_cycle(self) -> None:
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.current = None
            self.h11.start_next_cycle()
            # Pipelined bytes already buffered inside h11: the running input loop takes them, or start one
            # (iterating rather than recursing, however many requests one packet carries).
            if not self._receiving:
                self.data_received(b"")

    async def writable(self) -> None:
        """Return once the transport is not paused (or the connection is gone)."""
        while self._paused and self.transport is not None and not self.transport.is_closing():
            if self._writable is None:
                self._writable = asyncio.get_running_loop().create_future()
            await self._writable

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_writers()

    def _wake_writers(self) -> None:
        fut, self._writable = self._writable, None
        if fut is not None and not fut.done():
            fut.set_result(None)

    def abort(self) -> None:
        """Close the socket abruptly."""
        if self.transport is not None:
            self.transport.abort()

    def drop(self) -> None:
        """Cut the connection as a crash would, keeping what was written deliverable (see H2Protocol)."""
        if self._dropped or self.transport is None:
            return
        self._dropped = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        asyncio.get_running_loop().call_later(2.0, self.abort)

    # -- input -----------------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self._dropped:
            return
        if data:
            self.h11.receive_data(data)
        self._receiving = True
        try:
            self._process_events()
        finally:
            self._receiving = False

    def _process_events(self) -> None:
        while True:
            try:
                ev = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._bad_request(exc)
                return
            if ev is h11.NEED_DATA or ev is h11.PAUSED:
                return
            if isinstance(ev, h11.Request):
                self._on_request(ev)
            elif isinstance(ev, h11.Data):
                req = self.current
                if req is not None:
                    if req.on_data is not None:
                        req.on_data(bytes(ev.data))
                    else:
                        req.body += ev.data
            elif isinstance(ev, h11.EndOfMessage):
                self._on_end()
            elif isinstance(ev, h11.ConnectionClosed):
                if self.transport is not None:
                    self.transport.close()
                return

    def eof_received(self) -> bool:
        """The client half-closed: let h11 see the end of input, then close our side too."""
        if not self._dropped:
            self.h11.receive_data(b"")
            self.data_received(b"")
        return False

    def _on_request(self, ev: h11.Request) -> None:
        headers: dict[str, str] = {}
        for name, value in ev.headers:
            key = name.decode("latin-1")
            val = value.decode("utf-8", "surrogateescape")
            headers[key] = f"{headers[key]}, {val}" if key in headers else val
        req = H1Request(self, ev.method.decode("ascii"), ev.target.decode("latin-1"), headers)
        self.current = req
        try:
            self.app.on_request(req)
        except Exception:
            log.exception("request handler failed")
            req.respond(500, [("content-type", "application/json")], b'{"code":"other","message":"internal"}')
        if not req.started and self.h11.they_are_waiting_for_100_continue:
            self.send(h11.InformationalResponse(status_code=100, headers=[]))

    def _on_end(self) -> None:
        req = self.current
        if req is None:
            return
        req.ended = True
        if req.on_end is not None:
            req.on_end()
        if req.response_done:
            self._next_cycle()

    def _bad_request(self, exc: h11.RemoteProtocolError) -> None:
        log.debug("HTTP/1.1 protocol error, closing connection: %s", exc)
        if self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE) and self.transport is not None:
            headers = [("content-type", "application/json"), ("content-length", str(len(_BAD_REQUEST)))]
            with contextlib.suppress(h11.LocalProtocolError):
                for event in (
                    h11.Response(status_code=exc.error_status_hint, headers=headers),
                    h11.Data(data=_BAD_REQUEST),
                    h11.EndOfMessage(),
                ):
                    self.transport.write(self.h11.send(event) or b"")
        self._close_current()
        if self.transport is not None:
            self.transport.close()

    def _close_current(self) -> None:
        req, self.current = self.current, None
        if req is not None:
            req.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._close_current()
        self._wake_writers()
        if self._on_close is not None:
            self._on_close()
