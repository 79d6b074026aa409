"""What a request handler sees of one request, whichever protocol (HTTP/2 or HTTP/1.1) carried it.

A handler either lets the body accumulate and acts on ``on_end`` (unary calls) or consumes it chunk by chunk
through ``on_data`` (sessions). The response is started once, then sent as DATA (HTTP/2) or chunks (HTTP/1.1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

__all__ = ["App", "Request"]


class Request(Protocol):
    """One request as received and the response being sent."""

    method: str
    #: The raw request target, query included, still percent-encoded.
    path: str
    #: Lower-case header names.
    headers: dict[str, str]
    body: bytearray
    #: The whole request body has arrived.
    ended: bool
    #: The peer went away or reset the request: nothing more can be sent.
    closed: bool
    on_data: Callable[[bytes], None] | None
    on_end: Callable[[], None] | None
    on_reset: Callable[[], None] | None

    @property
    def conn(self) -> object:
        """The connection the request came on (per-connection limits key on it)."""

    def start(self, status: int, headers: list[tuple[str, str]] | None = None, *, end: bool = False) -> None:
        """Send the response headers (``end`` = no body)."""

    def respond(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        """A complete response."""

    def send(self, data: bytes, *, end: bool = False) -> None:
        """Queue response body bytes."""

    def end(self) -> None:
        """End the response."""

    async def drain(self) -> None:
        """Wait until the queued response body is small (backpressure for read sessions)."""

    def abort_connection(self) -> None:
        """Drop the whole connection (fault injection), after writing what is queued."""


class App(Protocol):
    """What a connection needs from the application."""

    def on_request(self, req: Request) -> None:
        """A request's headers arrived; set ``req.on_data``/``req.on_end`` or respond."""
