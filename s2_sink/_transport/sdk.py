"""The one boundary with s2-sdk's private parts: every ``s2_sdk._*`` import and every reach into an SDK
client's or connection's internals is here, and nowhere else in the sink.

s2-sdk exports a typed client (``S2``, ``S2Basin``, ``S2Stream``, records, errors) but not what the bulk
paths need to speak S2S themselves over the SDK's own HTTP/2 connections: its protobuf messages, its S2S
framing, its transport errors and reconnect rules, the stream's transport and settings, and the connections of
its pool (where a read session advertises larger HTTP/2 frames). Each is named below once, typed as we use
it. `tests/unit/transport/test_sdk_contract.py` checks every name and attribute relied on against the
installed SDK and names the one that moved; `tests/unit/transport/test_sdk_boundary.py` fails if another
module imports ``s2_sdk._``. The pin in pyproject (``s2-sdk``) is the range that contract passed on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import s2_sdk
import s2_sdk._generated.s2.v1.s2_pb2 as pb
from s2_sdk._client import HttpClient
from s2_sdk._exceptions import (
    AppendIndefiniteFailureError,
    ConnectError,
    ReadTimeoutError,
    S2ClientError,
    TransportError,
)
from s2_sdk._mappers import append_ack_from_proto, append_input_to_proto
from s2_sdk._retrier import AdvisedReconnectLimiter, requires_reconnect
from s2_sdk._s2s import _stream_records_path
from s2_sdk._s2s._protocol import Message, frame_message, maybe_compress, parse_error_info, read_messages
from s2_sdk._types import _S2_ENCRYPTION_KEY_HEADER

if TYPE_CHECKING:
    from h2.connection import H2Connection

__all__ = [
    "ENCRYPTION_KEY_HEADER",
    "AdvisedReconnectLimiter",
    "AppendIndefiniteFailureError",
    "ConnectError",
    "HttpClient",
    "Message",
    "ReadTimeoutError",
    "S2ClientError",
    "TransportError",
    "advertise_settings",
    "append_ack_from_proto",
    "append_input_to_proto",
    "basin_transport",
    "encryption_key",
    "frame_message",
    "h2_state",
    "maybe_compress",
    "parse_error_info",
    "pb",
    "pooled_connections",
    "read_messages",
    "requires_reconnect",
    "stream_records_path",
    "stream_transport",
]

ENCRYPTION_KEY_HEADER: str = _S2_ENCRYPTION_KEY_HEADER
"""The request header carrying a stream's encryption key (the SDK sends it on its own reads)."""


def stream_records_path(stream: str) -> str:
    """``/v1/streams/{stream}/records``, the name escaped as the SDK escapes it."""
    path: str = _stream_records_path(stream)
    return path


def basin_transport(client: s2_sdk.S2, basin: str) -> HttpClient:
    """The SDK client's own HTTP/2 transport for ``basin`` (shared with its unary calls and sessions)."""
    transport: HttpClient = client._get_basin_client(basin)
    return transport


def stream_transport(handle: s2_sdk.S2Stream) -> HttpClient:
    """A stream handle's transport, as its own sessions use it."""
    client: HttpClient = handle._client
    return client


def encryption_key(handle: s2_sdk.S2Stream) -> str | None:
    """The stream handle's encryption key, if it has one."""
    key: str | None = handle._encryption_key
    return key


def pooled_connections(client: HttpClient) -> Iterator[Any]:
    """The HTTP/2 connections the transport's pool holds to its own endpoint (a snapshot)."""
    for pooled in list(client._pool._hosts.get(client._base_url, ())):
        yield pooled._conn


def h2_state(conn: Any) -> H2Connection | None:
    """A pooled connection's HTTP/2 state machine, None before it is connected; skipped when unavailable."""
    if not conn.is_available:
        return None
    state: H2Connection | None = conn._h2
    return state


async def advertise_settings(conn: Any, settings: dict[int, int]) -> None:
    """Send a SETTINGS frame on a pooled connection, under its write lock (as its own writes are)."""
    async with conn._write_lock:
        conn._h2.update_settings(settings)
        await conn._flush(force=True)
