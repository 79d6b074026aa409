"""HTTP/2 (h2c, prior knowledge) connection plumbing on the pure-Python ``h2`` state machine.

One ``H2Protocol`` per TCP connection. Incoming requests become ``H2Request`` objects (a
``_request.Request``) handed to the application's ``on_request``; the application either lets the body
accumulate and acts on ``on_end`` (unary calls) or consumes it chunk by chunk through ``on_data`` (S2S
sessions, handled synchronously inside ``data_received`` for throughput). Outgoing DATA respects the peer's
flow-control windows: what does not fit waits in a per-stream queue until a WINDOW_UPDATE arrives. Bytes for
the socket are coalesced and written once per loop iteration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings

from s2_sink._transport import hyperframe_repr_patch
from s2_sink.lite._request import App

__all__ = ["H2Protocol", "H2Request"]

log = logging.getLogger(__name__)


hyperframe_repr_patch.install()  # h2 would hex-encode every DATA frame it receives (see that module)

_WINDOW = 16 * 1024 * 1024
_MAX_FRAME = 4 * 1024 * 1024 - 1
_DRAIN_THRESHOLD = 4 * 1024 * 1024


class H2Request:
    """One HTTP/2 stream: the request as received and the response being sent."""

    __slots__ = (
        "_drained",
        "_end_pending",
        "_ended_out",
        "_out",
        "_out_bytes",
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
        "started",
        "stream_id",
    )

    def __init__(
        self, conn: H2Protocol, stream_id: int, method: str, path: str, headers: dict[str, str]
    ) -> None:
        self.conn = conn
        self.stream_id = stream_id
        self.method = method
        self.path = path
        self.headers = headers
        self.body = bytearray()
        self.ended = False
        self.closed = False
        self.started = False
        self.on_data: Callable[[bytes], None] | None = None
        self.on_end: Callable[[], None] | None = None
        self.on_reset: Callable[[], None] | None = None
        self._out: deque[bytes | memoryview] = deque()
        self._out_bytes = 0
        self._end_pending = False
        self._ended_out = False
        self._drained: asyncio.Event | None = None

    # -- response --------------------------------------------------------------------------------------------

    def start(self, status: int, headers: list[tuple[str, str]] | None = None, *, end: bool = False) -> None:
        """Send the response headers (``end`` = no body)."""
        if self.closed or self.started:
            return
        self.started = True
        hdrs = [(":status", str(status)), *(headers or [])]
        try:
            self.conn.h2.send_headers(self.stream_id, hdrs, end_stream=end)
        except h2.exceptions.H2Error as exc:
            log.debug("cannot send headers on stream %d: %s", self.stream_id, exc)
            self.closed = True
            return
        if end:
            self._ended_out = True
            self.conn.finished(self)
        self.conn.schedule_flush()

    def respond(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        """A complete response."""
        if not body:
            self.start(status, headers, end=True)
            return
        self.start(status, [*headers, ("content-length", str(len(body)))])
        self.send(body, end=True)

    def send(self, data: bytes, *, end: bool = False) -> None:
        """Queue response DATA (sent as the peer's window allows)."""
        if self.closed or self._end_pending:
            return
        if data:
            self._out.append(data)
            self._out_bytes += len(data)
        if end:
            self._end_pending = True
        self.pump()

    def end(self) -> None:
        """End the response."""
        self.send(b"", end=True)

    @property
    def response_done(self) -> bool:
        """The response has been ended (or the stream is gone)."""
        return self._end_pending or self._ended_out or self.closed

    def pump(self) -> None:
        """Move queued DATA out as far as flow control allows.

        The first frame of a call goes through h2, which checks that the connection and the stream may
        still send; the frames after it (nothing can change those states in between) are written as they
        are, ``[length:3][type 0][flags 0][stream id:4]`` then the bytes, with h2's flow-control windows
        charged the same: h2 would spend far more building a frame object per 16 KiB (the default frame size)
        than the frame's bytes cost to copy. The last frame of the response, with END_STREAM, goes through h2.
        """
        if self.closed or self._ended_out:
            return
        conn = self.conn
        h2c = conn.h2
        sid = self.stream_id
        out = self._out
        raw: list[bytes | memoryview] = []
        checked = False
        try:
            while out:
                window = h2c.local_flow_control_window(sid)
                if window <= 0:
                    break
                chunk = out[0]
                piece: bytes | memoryview
                n = min(len(chunk), window, h2c.max_outbound_frame_size)
                last = n == len(chunk)
                if last:
                    out.popleft()
                    piece = chunk
                else:
                    view = memoryview(chunk)
                    piece, out[0] = view[:n], view[n:]
                end_now = last and self._end_pending and not out
                self._out_bytes -= n
                if checked and not end_now:
                    raw += ((n << 48 | sid).to_bytes(9, "big"), piece)
                    h2c.outbound_flow_control_window -= n
                    h2c.streams[sid].outbound_flow_control_window -= n
                    continue
                if raw:
                    conn.write_frames(raw)
                    raw = []
                h2c.send_data(sid, piece, end_stream=end_now)
                checked = True
                if end_now:
                    self._ended_out = True
            if raw:
                conn.write_frames(raw)
            if not out and self._end_pending and not self._ended_out:
                h2c.end_stream(sid)
                self._ended_out = True
        except (h2.exceptions.H2Error, KeyError) as exc:
            log.debug("stream %d closed while sending: %s", sid, exc)
            self.close()
            return
        conn.schedule_flush()
        if self._ended_out:
            conn.finished(self)
        if self._drained is not None and self._out_bytes < _DRAIN_THRESHOLD:
            self._drained.set()

    async def drain(self) -> None:
        """Wait until the queued response DATA is small (backpressure for read sessions)."""
        while self._out_bytes >= _DRAIN_THRESHOLD and not self.closed:
            self._drained = asyncio.Event()
            await self._drained.wait()

    def close(self) -> None:
        """The stream is gone (reset or connection lost): drop queued output and tell the handler."""
        if self.closed:
            return
        self.closed = True
        self._out.clear()
        self._out_bytes = 0
        if self._drained is not None:
            self._drained.set()
        cb = self.on_reset
        if cb is not None:
            self.on_reset = None
            cb()

    def abort_connection(self) -> None:
        """Drop the whole TCP connection without GOAWAY (fault injection), after writing what is queued."""
        self.conn.drop()


class H2Protocol(asyncio.Protocol):
    """The server side of one HTTP/2 connection."""

    def __init__(self, app: App, on_close: Callable[[], None] | None = None) -> None:
        self.app = app
        self.h2 = h2.connection.H2Connection(
            config=h2.config.H2Configuration(client_side=False, header_encoding="utf-8")
        )
        self.transport: asyncio.Transport | None = None
        self.requests: dict[int, H2Request] = {}
        self._flush_scheduled = False
        self._dropped = False
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sc = h2.settings.SettingCodes
        self.h2.local_settings = h2.settings.Settings(
            client=False,
            initial_values={
                sc.MAX_CONCURRENT_STREAMS: 1000,
                sc.INITIAL_WINDOW_SIZE: _WINDOW,
                sc.MAX_FRAME_SIZE: _MAX_FRAME,
                sc.ENABLE_CONNECT_PROTOCOL: 0,
            },
        )
        # Replacing local_settings (rather than update_settings) sends them in the preface; the frame-size
        # limit that h2 enforces is only derived from an ack of an update, so set it to match.
        self.h2.max_inbound_frame_size = _MAX_FRAME
        self.h2.initiate_connection()
        self.h2.increment_flow_control_window(_WINDOW)
        self.flush()

    def abort(self) -> None:
        """Close the socket abruptly."""
        if self.transport is not None:
            self.transport.abort()

    def drop(self) -> None:
        """Cut the connection as a crash would, but keep what was already sent deliverable.

        Closing a socket whose receive queue holds unread bytes (pipelined frames) sends a TCP RST, and a RST
        can make the peer's kernel discard acks it has received but not yet handed to the client. So: write
        what is queued, half-close (FIN), ignore everything the peer still sends, and abort a little later.
        """
        if self._dropped or self.transport is None:
            return
        self.flush()
        self._dropped = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._loop.call_later(2.0, self.abort)

    def schedule_flush(self) -> None:
        """Write pending h2 output at the end of this loop iteration (coalescing many small frames)."""
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write pending h2 output now."""
        self._flush_scheduled = False
        if self._dropped:
            return
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def write_frames(self, frames: list[bytes | memoryview]) -> None:
        """Write frames built outside h2, after what h2 has queued (which must go first)."""
        self.flush()
        if not self._dropped and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(frames))

    def finished(self, req: H2Request) -> None:
        """Forget a stream once both directions are done."""
        if req.ended and req.response_done and self.requests.get(req.stream_id) is req:
            del self.requests[req.stream_id]

    def data_received(self, data: bytes) -> None:
        try:
            events = self.h2.receive_data(data)
        except h2.exceptions.ProtocolError as exc:
            log.debug("HTTP/2 protocol error, closing connection: %s", exc)
            self.flush()
            self.abort()
            return
        for ev in events:
            if isinstance(ev, h2.events.DataReceived):
                self._on_data(ev)
            elif isinstance(ev, h2.events.RequestReceived):
                self._on_request(ev)
            elif isinstance(ev, h2.events.StreamEnded):
                req = self.requests.get(ev.stream_id)
                if req is not None:
                    req.ended = True
                    if req.on_end is not None:
                        req.on_end()
                    self.finished(req)
            elif isinstance(ev, h2.events.WindowUpdated):
                if ev.stream_id:
                    req = self.requests.get(ev.stream_id)
                    if req is not None:
                        req.pump()
                else:
                    for req in list(self.requests.values()):
                        req.pump()
            elif isinstance(ev, h2.events.RemoteSettingsChanged):
                for req in list(self.requests.values()):
                    req.pump()
            elif isinstance(ev, h2.events.StreamReset):
                req = self.requests.pop(ev.stream_id, None)
                if req is not None:
                    req.close()
            elif isinstance(ev, h2.events.ConnectionTerminated):
                self.flush()
                if self.transport is not None:
                    self.transport.close()
        self.flush()

    def _on_request(self, ev: h2.events.RequestReceived) -> None:
        headers: dict[str, str] = {}
        for name, value in ev.headers or ():
            headers[str(name)] = str(value)
        req = H2Request(self, ev.stream_id, headers.get(":method", ""), headers.get(":path", "/"), headers)
        self.requests[ev.stream_id] = req
        if ev.stream_ended is not None:
            # Headers carried END_STREAM (no body); the StreamEnded event that follows runs ``on_end``.
            req.ended = True
        try:
            self.app.on_request(req)
        except Exception:
            log.exception("request handler failed")
            req.respond(500, [("content-type", "application/json")], b'{"code":"other","message":"internal"}')

    def _on_data(self, ev: h2.events.DataReceived) -> None:
        sid = ev.stream_id
        if ev.flow_controlled_length:
            with contextlib.suppress(h2.exceptions.StreamClosedError, KeyError):
                self.h2.acknowledge_received_data(ev.flow_controlled_length, sid)
        req = self.requests.get(sid)
        if req is None or ev.data is None:
            return
        if req.on_data is not None:
            req.on_data(ev.data)
        else:
            req.body += ev.data

    def connection_lost(self, exc: Exception | None) -> None:
        reqs = list(self.requests.values())
        self.requests.clear()
        for req in reqs:
            req.close()
        if self._on_close is not None:
            self._on_close()
