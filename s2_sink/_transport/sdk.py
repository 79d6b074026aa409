"""The one boundary with s2-sdk's private parts: every ``s2_sdk._*`` import and every reach into an SDK
client's or connection's internals is here. Bulk paths speak S2S over the SDK's HTTP/2 connections, with its
messages, framing, transport errors, reconnect rules, pooled connections and request state (`_Unary`), each
named once. `tests/unit/transport/test_sdk_contract.py` checks every name relied on against the installed SDK
(pyproject pins the range it passed on); `test_sdk_boundary.py` fails if another module imports ``s2_sdk._``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Final, TypeVar

import s2_sdk
import s2_sdk._generated.s2.v1.s2_pb2 as pb
from h2 import utilities as h2_fields
from h2.settings import SettingCodes
from hpack import Encoder, NeverIndexedHeaderTuple
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

from s2_sink._transport import h2_frames

if TYPE_CHECKING:
    from h2.connection import H2Connection

T = TypeVar("T")

__all__ = [
    "ENCRYPTION_KEY_HEADER", "AdvisedReconnectLimiter", "AppendIndefiniteFailureError", "ConnectError",
    "HttpClient", "Message", "ReadTimeoutError", "S2ClientError", "TransportError", "advertise_settings",
    "append_ack_from_proto", "append_input_to_proto", "basin_transport", "encryption_key", "frame_message",
    "get_corked", "h2_state", "maybe_compress", "normalize_exception", "parse_error_info", "pb",
    "pooled_connections", "post_unary", "read_messages", "requires_reconnect", "stream_records_path",
    "stream_transport",
]  # fmt: skip

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
    """Send a SETTINGS frame on a pooled connection, under its write lock (as its own writes are). A larger
    frame size is taken from now on, not from the ACK: h2 checks a chunk against the size in force when it
    came, so larger frames read in one chunk with the server's ACK would fail the connection."""
    async with conn._write_lock:
        conn._h2.update_settings(settings)
        frame = settings.get(SettingCodes.MAX_FRAME_SIZE, 0)
        conn._h2.max_inbound_frame_size = max(conn._h2.max_inbound_frame_size, frame)
        await conn._flush(force=True)


def post_unary(
    client: HttpClient,
    path: str,
    headers: dict[str, str],
    body: bytes,
    *,
    decode: Callable[[bytes], T],
    failure: Callable[[Exception], BaseException],
) -> asyncio.Future[T]:
    """``POST`` `body` as ``unary_request`` does (pool, errors, timeout, compression), started now: the
    future resolves with `decode` of the answer's body, or fails with `failure` of what failed it. Its
    frames leave in one socket write with those of the turn's other requests (`_cork`); on a ready
    connection it takes no task (`_Unary`): for many small streams, a unary append each, the task, queue,
    events and timeout of ``unary_request``'s way were most of a stream's client CPU."""
    request = _Unary(asyncio.get_running_loop().create_future(), decode, failure)
    return request.send(client, path, headers, body)  # type: ignore[no-any-return]


async def get_corked(client: HttpClient, path: str, headers: dict[str, str] | None = None) -> bytes:
    """``GET`` `path` (with `headers`) as ``unary_request`` does, sent as `post_unary` sends (a read's
    tail lookups, a small stream's unary read); the answer's body, failures raised as the SDK's are."""
    request = _Unary(asyncio.get_running_loop().create_future(), bytes, normalize_exception)
    answer: bytes = await request.send(client, path, headers or {}, None)
    return answer


_NO_EVENT: Final = SimpleNamespace(set=lambda: None)  # a ``window_updated`` nothing waits on


class _Unary:
    """One unary request, from its frames to its answer: it stands in the connection's ``_streams`` where
    the SDK keeps a request's ``_StreamState``, under that state's names; the receive loop (or a failure)
    hands it the answer and ends it, which resolves the request's future."""

    def __init__(self, future: asyncio.Future[Any], decode: Callable[[bytes], Any], failure: Any) -> None:
        self.future, self._decode, self._failure = future, decode, failure
        self._chunks: list[bytes] = []
        self._headers: list[tuple[str, str]] | None = None
        self._ended = self.end_stream_received = False
        self.error: BaseException | None = None
        self.stream_id = 0
        self._pc: Any = None
        self._timer: asyncio.TimerHandle | None = None
        self.window_updated: Any = _NO_EVENT
        self._block, self._rest, self._window, self._initial, self._ends = b"", b"", 0, 0, 0

    # The SDK's names on a request's state; nothing stays unacknowledged (`h2_frames.Split` acknowledges).
    response_headers = data_queue = ended = property(lambda self: self)
    unacked_flow_bytes = property(lambda self: 0, lambda self, _: None)

    def done(self) -> bool:  # response_headers
        return self._headers is not None

    def set_exception(self, exc: BaseException) -> None:  # ``error`` holds it (set first)
        pass

    def exception(self) -> BaseException | None:
        return self.error

    def put_nowait(self, item: None) -> None:  # data_queue: only a failure's end comes this way
        pass

    def is_set(self) -> bool:  # ended
        return self._ended

    def set(self) -> None:
        if self._ended:
            return
        self._ended = True
        if self._timer is not None:
            self._timer.cancel()
        if self.end_stream_received:  # the receive loop's own end of the stream: the answer is whole
            self._release()
        else:  # failed, maybe while the connection walks its streams: released after
            self.future.get_loop().call_soon(self._release)
        if self.future.done():  # cancelled
            return
        try:
            if self.error is not None and not self.end_stream_received:
                raise self.error
            self.future.set_result(self._decode(_answer(self._headers or [], b"".join(self._chunks))))
        except BaseException as exc:  # noqa: BLE001 - the request's failure, whatever it is
            self._fail(exc)

    def send(self, client: HttpClient, path: str, headers: dict[str, str], body: bytes | None) -> Any:
        """Queue the request's frames on a ready connection of the pool now; without one (none connected,
        none with room, or its write lock held), once the pool has one. Returns the request's future."""
        if not isinstance(client, HttpClient):
            _spawn(self._ask(client, path, headers, body))
            return self.future
        if body is not None and client._compression != s2_sdk.Compression.NONE:
            body = compress(body, client._compression)
        block = _request_block(client, path, headers, None if body is None else len(body))
        pool = client._pool
        if not pool._closed:
            pool._ensure_reaper()
            for pc in pool._hosts.get(client._base_url, ()):
                if pc.has_capacity and not pc._conn._write_lock.locked():
                    self._start(pc, client._request_timeout, block, body)
                    return self.future
        _spawn(self._send_later(client, block, body))
        return self.future

    async def _ask(self, client: Any, path: str, headers: dict[str, str], body: bytes | None) -> None:
        try:
            method = "GET" if body is None else "POST"
            answer = await client.unary_request(method, path, headers=dict(headers), content=body)
            self.future.set_result(self._decode(bytes(answer.content)))
        except BaseException as exc:  # noqa: BLE001 - the request's failure, as its task would hold it
            self._fail(exc)

    async def _send_later(self, client: HttpClient, block: bytes, body: bytes | None) -> None:
        try:
            pc, state = await client._pool.checkout(client._base_url)
            conn = pc._conn
            try:
                async with conn._write_lock:
                    if state.error is not None:
                        raise state.error
                    if not self.future.done():
                        conn._pending_streams.pop(id(state), None)  # this request takes its place
                        self._start(pc, client._request_timeout, block, body)
            finally:
                conn.release_stream(None, state)
        except BaseException as exc:  # noqa: BLE001 - the request's failure, as its task would hold it
            self._fail(exc)

    def _start(self, pc: Any, timeout: float, block: bytes, body: bytes | None) -> None:
        """Open the request's HTTP/2 stream, queue its frames (`h2_frames`), the write left to `_uncork`."""
        self._pc, conn = pc, pc._conn
        h2: H2Connection = conn._h2
        split: Any = h2.receive_data
        if not isinstance(split, h2_frames.Split):  # once per connection
            h2.decoder = h2_frames.Answers(h2.decoder)  # type: ignore[assignment]
            split = h2.receive_data = h2_frames.Split(h2)  # type: ignore[method-assign,assignment]
        self.stream_id = stream_id = h2_frames.open_stream(h2, block, end_stream=body is None)
        conn._streams[stream_id] = split.ours[stream_id] = self
        self._initial = self._window = h2.remote_settings.initial_window_size
        if body is not None:
            self._rest = body
            self.window_updated = SimpleNamespace(set=self._send_some)
            self._send_some(empty=not body)
        _cork(conn).append(self)
        self._timer = self.future.get_loop().call_later(timeout, self._time_out)

    def _send_some(self, *, empty: bool = False) -> None:
        """Queue what of the body the send windows take now (the rest as the server's window updates
        come, with the receive loop's write)."""
        h2: H2Connection = self._pc._conn._h2
        initial = h2.remote_settings.initial_window_size
        self._window, self._initial = self._window + initial - self._initial, initial
        body, size = self._rest, h2.max_outbound_frame_size
        room = min(len(body), self._window, h2.outbound_flow_control_window)
        if self._ended or (room <= 0 and not empty):
            return
        for at in range(0, max(room, 1), size):
            piece = body[at : min(at + size, room)]
            ends = h2_frames.END_STREAM if at + len(piece) == len(body) else 0
            h2_frames.queue(h2, h2_frames.DATA, ends, self.stream_id, piece)
        self._rest, self._window = body[room:], self._window - room
        h2.outbound_flow_control_window -= room

    def frame(self, kind: int, flags: int, payload: bytes) -> bool:
        """One of the answer's frames (`h2_frames.Split`): whether the stream ended with it."""
        if kind == h2_frames.RST_STREAM:
            code = int.from_bytes(payload[:4])
            self._pc._conn._fail_stream(self, ProtocolError(f"Stream reset with error code {code}", code))
            return True
        if kind == h2_frames.WINDOW_UPDATE:
            self._window += int.from_bytes(payload[:4]) & 0x7FFFFFFF
            self._send_some()
        ends = flags & h2_frames.END_STREAM
        if kind == h2_frames.DATA and not self._ended:
            self._chunks.append(payload)
        elif kind in (h2_frames.HEADERS, h2_frames.CONTINUATION):
            self._block += payload
            self._ends = ends = ends if kind == h2_frames.HEADERS else self._ends
            if not flags & h2_frames.END_HEADERS:
                return False
            fields = self._pc._conn._h2.decoder.decode(self._block)  # decoded late too: the table changes
            self._block = b""
            self._headers = fields if self._headers is None else self._headers  # not the trailers
        elif kind != h2_frames.DATA:
            return False
        if ends:
            self.end_stream_received = True
            if self._rest:  # answered before the whole body went: closed as RFC 9113, 8.1 allows
                h2_frames.queue(self._pc._conn._h2, h2_frames.RST_STREAM, 0, self.stream_id, bytes(4))
            self.set()
        return bool(ends)

    def _time_out(self) -> None:
        self._timer = None
        if not self._ended:
            conn = self._pc._conn
            conn._fail_stream(self, ReadTimeoutError("Request timed out"))
            conn._h2.receive_data.cancel(self.stream_id, self._block, self._ends)  # `h2_frames.Split`
            _cork(conn)

    def _fail(self, exc: BaseException) -> None:
        if self.future.done() or (isinstance(exc, asyncio.CancelledError) and self.future.cancel()):
            return
        if isinstance(exc, ServerDrainingError) and self._pc is not None:
            self._pc.retire()
        failed = self._failure(exc) if isinstance(exc, Exception) else exc
        if failed is not exc and failed.__cause__ is None:
            failed.__cause__ = exc
        self.future.set_exception(failed)
        self.future.exception()  # retrieved: whoever awaits it still sees it

    def _release(self) -> None:
        """Give the request's HTTP/2 stream back (the connection closed if retired and idle)."""
        pc = self._pc
        if pc is None:
            return
        if pc._conn._streams.get(self.stream_id) is self:
            del pc._conn._streams[self.stream_id]
        pc.touch_idle()
        if pc.is_retired and pc.is_idle:
            _spawn(pc.close())


_spawned: set[asyncio.Task[Any]] = set()  # requests' tasks (corked writes, rarer paths), held strongly


def _spawn(coro: Coroutine[Any, Any, Any]) -> None:
    task = asyncio.get_running_loop().create_task(coro)
    _spawned.add(task)
    task.add_done_callback(_spawned.discard)


def _cork(conn: Any) -> list[Any]:
    """The requests waiting for this turn's write on `conn`, scheduled with the first (all h2 queued goes)."""
    waiting = _corked.get(conn)
    if waiting is None:
        waiting = _corked[conn] = []
        asyncio.get_running_loop().call_soon(_uncork, conn)
    return waiting


_corked: dict[Any, list[Any]] = {}  # per connection, the requests whose frames wait for this turn's write


def _uncork(conn: Any) -> None:
    _spawn(_write_corked(conn, _corked.pop(conn)))


async def _write_corked(conn: Any, states: list[Any]) -> None:
    """One socket write of the corked requests' frames; a failed write fails them."""
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


_BLOCKS: dict[tuple[tuple[str, str], ...], tuple[bytes, bytes]] = {}
"""The constant parts of request header blocks (`request_block`), by the headers they encode."""

_MAX_BLOCKS: Final = 64  # header sets kept encoded
_REQUEST: Final = h2_fields.HeaderValidationFlags(
    is_client=True, is_trailer=False, is_response_header=False, is_push_promise=False
)
_PATH_INDEX: Final = 4  # ``:path`` in HPACK's static table (RFC 7541, appendix A)
_CONTENT_LENGTH_INDEX: Final = 28  # ``content-length`` there


def _request_block(client: HttpClient, path: str, headers: dict[str, str], length: int | None) -> bytes:
    """The HPACK header block of a ``POST`` of `length` bytes to `path` (a ``GET`` when None) with the headers
    ``unary_request`` sends, in never-indexed literals and static-table indexes (valid whatever a connection's
    HPACK state), all but ``:path`` and ``content-length`` encoded once per transport, not per request."""
    listed = client._build_headers("GET" if length is None else "POST", "", headers)
    if length is not None and client._compression != s2_sdk.Compression.NONE:
        listed.append(("content-encoding", _COMPRESSION_ENCODING[client._compression]))
    key = tuple(listed)
    constant = _BLOCKS.get(key)
    if constant is None:
        if len(_BLOCKS) >= _MAX_BLOCKS:
            _BLOCKS.clear()
        # h2's own normalizing (an empty token's "Bearer " stripped) and validation, once (a stand-in :path).
        fields = h2_fields.utf8_encode_headers([(k, "/" if k == ":path" else v) for k, v in key])
        normalized = h2_fields.normalize_outbound_headers(fields, _REQUEST)
        fields = list(h2_fields.validate_outbound_headers(normalized, _REQUEST))
        pseudo = [NeverIndexedHeaderTuple(k, v) for k, v in fields if k.startswith(b":") and k != b":path"]
        regular = [NeverIndexedHeaderTuple(k, v) for k, v in fields if not k.startswith(b":")]
        constant = _BLOCKS[key] = (Encoder().encode(pseudo), Encoder().encode(regular))
    block = constant[0] + _literal(_PATH_INDEX, path.encode()) + constant[1]
    if length is None:
        return block
    return block + _literal(_CONTENT_LENGTH_INDEX, str(length).encode())


def _literal(index: int, value: bytes) -> bytes:
    """A never-indexed literal field named by the static table's `index` (RFC 7541, 6.2.3), not Huffman
    coded."""
    name = encode_integer(index, 4)
    name[0] |= 0x10
    return bytes(name) + bytes(encode_integer(len(value), 7)) + value
