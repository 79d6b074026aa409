"""One listening port, two protocols: a new connection is HTTP/2 (h2c with prior knowledge) if it opens with
the HTTP/2 connection preface, and HTTP/1.1 otherwise.

The first bytes are buffered until they either complete the 24-byte preface or stop matching it; then the
connection is handed to the protocol's own handler (``transport.set_protocol``), so afterwards nothing sits
between the socket and the HTTP/2 hot path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from s2_sink.lite._http1 import H1Protocol
from s2_sink.lite._http2 import H2Protocol
from s2_sink.lite._request import App

__all__ = ["H2_PREFACE", "SniffingProtocol"]

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class SniffingProtocol(asyncio.Protocol):
    """A connection whose protocol is not known yet. ``conns`` holds every open transport (for shutdown)."""

    def __init__(self, app: App, conns: set[asyncio.Transport]) -> None:
        self.app = app
        self.conns = conns
        self.transport: asyncio.Transport | None = None
        self.buffer = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.conns.add(transport)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        head = self.buffer[: len(H2_PREFACE)]
        if head == H2_PREFACE:
            self._hand_over(H2Protocol)
        elif not H2_PREFACE.startswith(head):
            self._hand_over(H1Protocol)

    def _hand_over(self, kind: Callable[[App, Callable[[], None]], asyncio.Protocol]) -> None:
        transport = self.transport
        assert transport is not None
        proto = kind(self.app, lambda: self.conns.discard(transport))
        transport.set_protocol(proto)
        proto.connection_made(transport)
        data, self.buffer = self.buffer, b""
        proto.data_received(data)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is not None:
            self.conns.discard(self.transport)
