"""An S2S append session fed with already serialized ``AppendInput`` messages (see `s2_sink._wire`), over the
SDK's own HTTP/2 transport (``HttpClient.streaming_request``: pooling, flow control, TLS and auth stay the
SDK's) with the S2S framing of ``s2_sdk._s2s._protocol``. Messages submitted while the sender was busy go out
as one write. Acks are matched to in-flight messages oldest first and checked against their record counts. A
terminal frame or a non-200 answer fails every pending ticket with the SDK's own error types; the session has
no retries of its own. On the server's reconnect advice it takes no more messages (`accepting`), half-closes
once what it carries is sent, and its connection is retired.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncGenerator
from functools import partial
from typing import Final

from s2_sdk import AppendAck, Compression, S2ClientError

from s2_sink._transport import sdk
from s2_sink._transport.sdk import (
    HttpClient,
    Message,
    TransportError,
    append_ack_from_proto,
    basin_transport,
    frame_message,
    maybe_compress,
    parse_error_info,
    pb,
    read_messages,
    stream_records_path,
)

__all__ = ["BulkAppendSession", "SessionClosedError", "append_once", "basin_transport"]

_HEADERS: Final = {"content-type": "s2s/proto", "accept": "s2s/proto"}
_UNARY_HEADERS: Final = {"content-type": "application/x-protobuf", "accept": "application/x-protobuf"}


class SessionClosedError(S2ClientError):
    """The session takes no more messages (closed, failed, or reconnect advised): use a fresh one.
    Nothing submitted after this point was sent, so re-sending elsewhere has no side effects."""


class BulkAppendSession:
    """One S2S append session on the runtime loop: `submit` pre-encoded messages, await their tickets."""

    def __init__(self, client: HttpClient, stream: str, compression: Compression = Compression.NONE) -> None:
        self.stream = stream
        self._client = client
        self._compression = compression
        self._outbox: list[bytes] = []
        """Framed messages not yet taken by the sender, oldest first."""
        self._wakeup: asyncio.Future[None] | None = None
        """The idle sender's, resolved by the next message or the half-close."""
        self._half_closed = False
        self._pending: deque[tuple[int, asyncio.Future[AppendAck]]] = deque()  # records, ticket
        self.error: BaseException | None = None
        """What failed the session, if it failed."""
        self._closing = False
        self.reconnect_advised = False
        self._runner = asyncio.get_running_loop().create_task(self._run())

    @property
    def accepting(self) -> bool:
        """Whether `submit` still sends (not closed, not failed, no reconnect advised)."""
        return not (self._closing or self.reconnect_advised or self.error is not None or self._runner.done())

    def abort(self) -> None:
        """End the session now (its HTTP/2 stream is reset): pending tickets fail, nothing more is sent."""
        self._closing = True
        self._runner.cancel()

    def submit(self, message: bytes, records: int) -> asyncio.Future[AppendAck]:
        """Send one serialized ``AppendInput`` of `records` records; the ticket resolves with its ack.

        Raises `SessionClosedError` when the session takes no more messages (nothing was sent).
        """
        if not self.accepting:
            raise SessionClosedError(
                f"append session to {self.stream!r} takes no more appends"
            ) from self.error
        ticket: asyncio.Future[AppendAck] = asyncio.get_running_loop().create_future()
        self._pending.append((records, ticket))
        body, compression = maybe_compress(message, self._compression)
        self._outbox.append(frame_message(Message(body, terminal=False, compression=compression)))
        self._wake()
        return ticket

    async def close(self) -> None:
        """Half-close after what was submitted, wait for the server to end the session; re-raises the
        session's error, if it failed."""
        if not self._closing:
            self._closing = True
            self._wake(half_close=True)
        await asyncio.shield(self._runner)
        if self.error is not None:
            raise self.error

    def _wake(self, *, half_close: bool = False) -> None:
        """Wake the idle sender; with `half_close`, it ends the request body once the outbox is sent."""
        self._half_closed |= half_close
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    async def _outgoing(self) -> AsyncGenerator[bytes]:
        while True:
            if self._outbox:
                frames, self._outbox = self._outbox, []
                yield frames[0] if len(frames) == 1 else b"".join(frames)
            elif self._half_closed:
                return
            else:
                self._wakeup = asyncio.get_running_loop().create_future()
                await self._wakeup
                self._wakeup = None

    async def _run(self) -> None:
        try:
            async with self._client.streaming_request(
                "POST", stream_records_path(self.stream), headers=dict(_HEADERS), content=self._outgoing()
            ) as response:
                if response.status_code != 200:
                    raise parse_error_info(await response.aread(), response.status_code)
                async for message in read_messages(response.aiter_bytes()):
                    self._acked(message)
                    if message.reconnect_advised and not self.reconnect_advised:
                        self.reconnect_advised = True
                        response.retire_connection()
                        self._wake(half_close=True)  # send nothing more on this session
                if self._pending:
                    raise S2ClientError(
                        f"append session ended with {len(self._pending)} unacknowledged appends"
                    )
        except Exception as exc:  # noqa: BLE001 - every failure fails the pending tickets
            self._fail(_as_session_error(exc))
        except BaseException as exc:
            self._fail(exc)
            raise
        finally:
            self._closing = True

    def _acked(self, message: Message) -> None:
        if not self._pending:
            raise S2ClientError("invalid ack: no append in flight")
        records, ticket = self._pending[0]  # stays pending (failed with the session) if the ack is wrong
        ack = _ack(records, message.body)
        self._pending.popleft()
        if not ticket.done():
            ticket.set_result(ack)

    def _fail(self, exc: BaseException) -> None:
        if not isinstance(exc, Exception):  # cancelled (aborted): tickets fail with an ordinary error
            exc = SessionClosedError(f"append session to {self.stream!r} was aborted")
        self.error = exc
        while self._pending:
            _, ticket = self._pending.popleft()
            if not ticket.done():
                ticket.set_exception(exc)
                ticket.add_done_callback(_retrieve)


def append_once(client: HttpClient, stream: str, message: bytes, records: int) -> asyncio.Future[AppendAck]:
    """One serialized ``AppendInput`` of `records` records as a unary append (``POST`` of the message, the
    ack in the answer), started now; its ticket resolves with the ack or fails as a session's would. For a
    stream's only append of a task: no session's headers, half-close and runner task to pay for; the unary
    appends started in one turn of the loop leave in one socket write (`sdk.post_unary`)."""
    path = stream_records_path(stream)
    return sdk.post_unary(
        client, path, _UNARY_HEADERS, message, decode=partial(_ack, records), failure=_as_session_error
    )


def _ack(records: int, content: bytes) -> AppendAck:
    ack = pb.AppendAck()
    ack.ParseFromString(content)
    count = ack.end.seq_num - ack.start.seq_num
    if count != records:
        raise S2ClientError(f"invalid ack: {count} records acknowledged for an append of {records}")
    return append_ack_from_proto(ack)


def _as_session_error(exc: Exception) -> Exception:
    """A transport failure as the SDK's own session reports it, an S2ClientError caused by it (retryable,
    and a refused connection side-effect free); others as they are."""
    if not isinstance(exc, TransportError):
        return exc
    err = S2ClientError(f"{type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def _retrieve(fut: asyncio.Future[AppendAck]) -> None:  # a failure is reported by whoever awaits it
    with contextlib.suppress(BaseException):
        fut.exception()
