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

import asyncio
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

import s2_sdk
import s2_sdk._generated.s2.v1.s2_pb2 as pb
from h2.utilities import (
    HeaderValidationFlags,
    normalize_outbound_headers,
    utf8_encode_headers,
    validate_outbound_headers,
)
from hpack import Decoder, Encoder, NeverIndexedHeaderTuple
from hpack.hpack import encode_integer
from s2_sdk._client import (
    _COMPRESSION_ENCODING,
    _ENCODING_COMPRESSION,
    HttpClient,
    Response,
    _header_value,
    _raise_response_error,
)
from s2_sdk._compression import compress, decompress
from s2_sdk._exceptions import (
    AppendIndefiniteFailureError,
    ConnectError,
    ProtocolError,
    ReadTimeoutError,
    S2ClientError,
    ServerDrainingError,
    TransportError,
    normalize_exception,
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
    "get_corked",
    "h2_state",
    "maybe_compress",
    "normalize_exception",
    "parse_error_info",
    "pb",
    "pooled_connections",
    "post_corked",
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


async def post_corked(client: HttpClient, path: str, headers: dict[str, str], body: bytes) -> bytes:
    """``POST`` `body` as the transport's ``unary_request`` does (same pool, errors, timeout and
    compression) and return the answer's body, but write its HEADERS and DATA frames to the socket together
    with those of every other request started in the same turn of the event loop.

    ``unary_request`` writes each request's HEADERS frame (a socket write and a drain), then its DATA frame
    (a second write): for a task's many small streams, a unary append each, those writes were a fifth of a
    stream's client CPU (`benchmarks.append_session --streams`). A body larger than the flow-control window
    or a frame sends its rest as ``unary_request`` does. The header block is encoded once per transport
    but for the path and length (`_request_block`). A transport that is not the SDK's own (the
    simulation's in-memory S2 stands in for it) is asked through its ``unary_request``."""
    if not isinstance(client, HttpClient):
        stand_in: Any = client
        answer = await stand_in.unary_request("POST", path, headers=dict(headers), content=body)
        return bytes(answer.content)
    if client._compression != s2_sdk.Compression.NONE:
        body = compress(body, client._compression)
    block = _request_block(client, path, headers, len(body))
    return await _exchange_corked(client, block, body)


async def get_corked(client: HttpClient, path: str, headers: dict[str, str] | None = None) -> bytes:
    """``GET`` `path` (with `headers`) as the transport's ``unary_request`` does and return the answer's
    body, its HEADERS frame written to the socket together with those of every other request started in
    the same turn of the event loop (`post_corked`), its header block encoded as `_request_block` encodes
    a ``POST``'s: a read planned over many streams asks each for its tail, a task reading many small
    streams reads each with a unary read, and a socket write and an encoding of the headers per request
    were most of what such a request cost. Failures are raised as the SDK's own calls raise them (a
    transport failure as an ``S2ClientError``). A stand-in transport is asked through ``unary_request``."""
    try:
        if not isinstance(client, HttpClient):
            stand_in: Any = client
            answer = await stand_in.unary_request("GET", path, headers=dict(headers or {}))
            return bytes(answer.content)
        return await _exchange_corked(client, _request_block(client, path, headers or {}, None), None)
    except Exception as exc:
        normalized = normalize_exception(exc)
        if normalized is exc:
            raise
        raise normalized from exc


async def _exchange_corked(client: HttpClient, block: bytes, body: bytes | None) -> bytes:
    """Send a request corked (`_send_corked`: its header block encoded already; no body, a HEADERS frame
    that ends the stream) and wait for its answer's body as ``unary_request`` does."""
    pc, state = await client._pool.checkout(client._base_url)
    conn = pc._conn
    stream_id: int | None = None
    try:
        async with conn._write_lock:
            stream_id, rest = _send_corked(conn, state, block, body)
        if rest:
            await conn.send_data(stream_id, rest, end_stream=True)
        async with asyncio.timeout(client._request_timeout):
            answer_headers = await state.response_headers
            chunks = []
            while (item := await state.data_queue.get()) is not None:
                chunk, flow_bytes = item if isinstance(item, tuple) else (item, 0)
                chunks.append(chunk)
                if flow_bytes:
                    # Acknowledged as received, as ``unary_request`` does (the answers of many requests
                    # share the connection's window), but not written at once: a write of its own would
                    # take the requests corked so far with it, so any window update leaves with this
                    # turn's corked write.
                    async with conn._write_lock:
                        assert conn._h2 is not None  # connected (the SDK's ack_data asserts it too)
                        state.unacked_flow_bytes -= flow_bytes
                        conn._h2.acknowledge_received_data(flow_bytes, stream_id)
                    _cork(conn)
        if state.error is not None and not state.end_stream_received:
            raise state.error
        return _answer(answer_headers, b"".join(chunks))
    except ServerDrainingError:
        pc.retire()
        raise
    except TimeoutError:
        raise ReadTimeoutError("Request timed out") from None
    finally:
        await _release(pc, stream_id, state)


def _send_corked(conn: Any, state: Any, block: bytes, body: bytes | None) -> tuple[int, bytes]:
    """Open the reserved HTTP/2 stream and queue its frames (under the connection's write lock), the
    write left to `_uncork`; returns the stream id and what of the body did not fit. `block`: the
    request's header block, encoded already (`_request_block`). Without a body (None), the HEADERS frame
    ends the stream."""
    if state.error is not None:
        raise state.error
    if conn._pending_streams.pop(id(state), None) is None:
        raise ProtocolError("Stream reservation missing")
    h2: H2Connection = conn._h2
    stream_id: int = h2.get_next_available_stream_id()
    conn._streams[stream_id] = state
    try:
        _send_encoded_headers(h2, stream_id, block, end_stream=body is None)
        if body is None:
            body, first = b"", 0
        else:
            first = min(len(body), h2.local_flow_control_window(stream_id), h2.max_outbound_frame_size)
            if first or not body:
                h2.send_data(stream_id, body[:first], end_stream=first == len(body))
    except BaseException:
        conn._streams.pop(stream_id, None)
        raise
    _cork(conn).append(state)
    return stream_id, body[first:]


def _cork(conn: Any) -> list[Any]:
    """The requests waiting for this turn's write on `conn` (`_corked`), the write scheduled with the
    first; whatever h2 queued by then (acknowledgements too) leaves with it."""
    waiting = _corked.get(conn)
    if waiting is None:
        waiting = _corked[conn] = []
        asyncio.get_running_loop().call_soon(_uncork, conn)
    return waiting


_corked: dict[Any, list[Any]] = {}
"""Per connection, the requests whose frames wait in its HTTP/2 buffer for this turn's write."""


_writing: set[asyncio.Task[None]] = set()
"""The corked writes in flight: the event loop keeps only a weak reference to a task."""


def _uncork(conn: Any) -> None:
    task = asyncio.get_running_loop().create_task(_write_corked(conn, _corked.pop(conn)))
    _writing.add(task)
    task.add_done_callback(_writing.discard)


async def _write_corked(conn: Any, states: list[Any]) -> None:
    """One socket write of the corked requests' frames; a failed write fails them (as a failed write of
    ``unary_request`` fails its request)."""
    try:
        async with conn._write_lock:
            await conn._flush(force=True)
    except (TransportError, OSError) as exc:
        for state in states:
            conn._fail_stream(state, exc)


def _answer(headers: list[tuple[str, str]], content: bytes) -> bytes:
    """The answer's body, decompressed; an error answer raised as ``unary_request`` raises it."""
    status = int(_header_value(headers, ":status") or 0)
    encoding = _header_value(headers, "content-encoding")
    if encoding is not None and encoding in _ENCODING_COMPRESSION:
        content = decompress(content, _ENCODING_COMPRESSION[encoding])
    if not 200 <= status < 300:
        response = Response(status, content, headers)
        _raise_response_error(response, retry_after_ms=_header_value(headers, "retry-after-ms"))
    return content


async def _release(pc: Any, stream_id: int | None, state: Any) -> None:
    """Give the request's HTTP/2 stream back as ``unary_request`` does (its window acknowledged, reset if
    unfinished, the connection closed if retired and idle)."""
    conn = pc._conn
    if stream_id is not None:
        if state.unacked_flow_bytes:
            with contextlib.suppress(TransportError, OSError):  # a failing connection fails its streams
                await conn.ack_all_data(stream_id, state)
        if not state.ended.is_set():
            await conn.reset_stream(stream_id)
    conn.release_stream(stream_id, state)
    pc.touch_idle()
    if pc.is_retired and pc.is_idle:
        await pc.close()


_BLOCKS: dict[tuple[tuple[str, str], ...], tuple[bytes, bytes]] = {}
"""The constant parts of request header blocks (`_request_block`), by the headers they encode."""

_MAX_BLOCKS: Final = 64
"""Header sets kept encoded (in practice one per transport and set of extra headers)."""
_REQUEST: Final = HeaderValidationFlags(
    is_client=True, is_trailer=False, is_response_header=False, is_push_promise=False
)
_PATH_INDEX: Final = 4
"""``:path`` in HPACK's static table (RFC 7541, appendix A)."""
_CONTENT_LENGTH_INDEX: Final = 28
"""``content-length`` in HPACK's static table."""


def _request_block(client: HttpClient, path: str, headers: dict[str, str], length: int | None) -> bytes:
    """The HPACK header block of a ``POST`` of `length` bytes to `path` (a ``GET``, with no body, when
    `length` is None) with the headers ``unary_request`` sends (the transport's own, `headers`, a ``POST``'s
    ``content-encoding`` and ``content-length``), encoded without the
    connection's dynamic table: every field is a never-indexed literal or a static-table index, so the block
    is valid on any connection whatever its HPACK state, and all but ``:path`` and ``content-length`` is
    encoded once per transport.

    h2 encoded each request's headers anew (normalized, validated, searched in the dynamic table, Huffman
    coded): ~0.15 ms per unary append, a third of a small stream's client CPU
    (`benchmarks.writer_path --streams 1000`)."""
    listed = client._build_headers("GET" if length is None else "POST", "", headers)
    if length is not None and client._compression != s2_sdk.Compression.NONE:
        listed.append(("content-encoding", _COMPRESSION_ENCODING[client._compression]))
    key = tuple(listed)
    constant = _BLOCKS.get(key)
    if constant is None:
        if len(_BLOCKS) >= _MAX_BLOCKS:
            _BLOCKS.clear()
        # h2's own normalizing and validation, once: lower-cased names, values stripped of surrounding
        # whitespace (an empty token's "Bearer "), the pseudo-headers a request needs (a stand-in :path).
        fields = utf8_encode_headers([(k, "/" if k == ":path" else v) for k, v in listed])
        fields = list(validate_outbound_headers(normalize_outbound_headers(fields, _REQUEST), _REQUEST))
        pseudo = [NeverIndexedHeaderTuple(k, v) for k, v in fields if k.startswith(b":") and k != b":path"]
        regular = [NeverIndexedHeaderTuple(k, v) for k, v in fields if not k.startswith(b":")]
        constant = _BLOCKS[key] = (Encoder().encode(pseudo), Encoder().encode(regular))
    block = constant[0] + _literal(_PATH_INDEX, path.encode()) + constant[1]
    if length is None:
        return block
    return block + _literal(_CONTENT_LENGTH_INDEX, str(length).encode())


def _literal(index: int, value: bytes) -> bytes:
    """A never-indexed literal field named by the static table's `index` (RFC 7541, 6.2.3), its value
    not Huffman coded."""
    name = encode_integer(index, 4)
    name[0] |= 0x10
    return bytes(name) + bytes(encode_integer(len(value), 7)) + value


class _Encoded:
    """Stands in for a connection's HPACK encoder for one ``send_headers``: the block is encoded already."""

    __slots__ = ("block",)

    def __init__(self, block: bytes) -> None:
        self.block = block

    def encode(self, headers: object, huffman: bool = True) -> bytes:
        return self.block


def _send_encoded_headers(
    h2: H2Connection, stream_id: int, block: bytes, *, end_stream: bool = False
) -> None:
    """h2's ``send_headers`` of a header block encoded already (`_request_block`): the stream opened and its
    HEADERS frames queued by h2 itself, only the encoding (with its normalizing and validating of the
    fields, done once for the block's constant part) skipped. A pending dynamic table size change must start
    the connection's next block (RFC 7541, 4.2): that request is encoded by h2, as before."""
    encoder = h2.encoder
    if encoder.header_table.resized:
        headers = Decoder().decode(block)
        h2.send_headers(stream_id, headers, end_stream=end_stream)
        return
    config = h2.config
    normalize, validate = config.normalize_outbound_headers, config.validate_outbound_headers
    h2.encoder = _Encoded(block)  # type: ignore[assignment]
    config.normalize_outbound_headers = config.validate_outbound_headers = False
    try:
        h2.send_headers(stream_id, (), end_stream=end_stream)
    finally:
        h2.encoder = encoder
        config.normalize_outbound_headers, config.validate_outbound_headers = normalize, validate
