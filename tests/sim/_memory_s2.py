"""An in-memory S2 behind the part of the SDK's surface the writer calls, with the lite server's semantics.

The service is the lite server's own store (`s2_sink.lite._store.Store` and its `Stream`): appends are
sequenced by ``Stream.sequence`` from the same protobuf bytes the SDK would send (fencing tokens,
``match_seq_num``, atomic batches, fence and trim command records, the 1 MiB / 1000-record limits), reads
go through the lite server's 416 and clamping rules (``ReadParams.resolve_start``) and ``Stream.collect``.
Only the transport is replaced: each call is a step of the `Scheduler`, which may refuse it, lose its
reply after applying it, or kill the caller's process before or after it.

A deleted stream answers as S2 answers one (s2-lite ``streamer.rs``, ``streams.rs``): while its deletion is
pending a new request gets 409 ``stream_deletion_pending``, then 404; an append session opened before the
deletion gets 503 ``unavailable`` for what it sends next, and never writes into a stream created anew under
the same name.

Surface: ``S2.basin``/``close``; ``S2Basin.name``/``stream``/``create_stream``/``get_stream_config``;
``S2Stream.name``/``check_tail``/``append``/``read``; and, for the append sessions
(`s2_sink._transport.append_session`), the basin transport the SDK client hands out
(``S2._get_basin_client``): ``HttpClient.streaming_request`` for an S2S append session, answered as the
lite server answers one (`AppendSessionResponse`), as a stream of the client's HTTP/2 connection
(`tests.sim._connection`), which may drop under every session on it; ``HttpClient.unary_request`` for a
unary append (a stream's only append of a task).
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, cast
from urllib.parse import unquote

from s2_sdk import (
    S2,
    AppendAck,
    AppendInput,
    FencingTokenMismatchError,
    ReadBatch,
    ReadLimit,
    ReadUnwrittenError,
    S2ClientError,
    S2ServerError,
    SeqNum,
    SeqNumMismatchError,
    StreamConfig,
    StreamInfo,
    StreamPosition,
    TailOffset,
)
from s2_sdk._exceptions import ProtocolError, TransportError
from s2_sdk._generated.s2.v1 import s2_pb2 as pb
from s2_sdk._mappers import append_input_to_proto, sequenced_record_from_proto

from s2_sink.config import S2Config
from s2_sink.lite._api_errors import ApiError, bad
from s2_sink.lite._appends import ack_for
from s2_sink.lite._batch import Batch
from s2_sink.lite._framing import FrameReader, encode_frame, encode_terminal
from s2_sink.lite._read_params import ReadParams
from s2_sink.lite._store import Store
from s2_sink.lite._stream import Stream
from tests.sim._connection import MemoryConnection
from tests.sim._scheduler import Op, Scheduler

__all__ = ["AppendSessionResponse", "MemoryS2", "MemoryService", "MemoryTransport"]

_ONE_MIB = 1024 * 1024
_RECONNECT_ADVISED = 0x10  # S2S flag bit 4 (s2_sdk._s2s._protocol)
_RECORDS_PATH = re.compile(r"/v1/streams/([^/]+)/records")


def _sdk_error(exc: ApiError) -> S2ServerError:
    """The SDK exception a client gets for the lite server's API error."""
    body: dict[str, Any] = exc._body or {}  # the error body the wire carries
    if exc.status == 412 and "fencing_token_mismatch" in body:
        return FencingTokenMismatchError(exc.code, exc.message, 412, str(body["fencing_token_mismatch"]))
    if exc.status == 412 and "seq_num_mismatch" in body:
        return SeqNumMismatchError(exc.code, exc.message, 412, int(body["seq_num_mismatch"]))
    if exc.status == 416:
        tail = body.get("tail", {})
        pos = StreamPosition(tail.get("seq_num", 0), tail.get("timestamp", 0))
        return ReadUnwrittenError(exc.code, exc.message, 416, pos)
    return S2ServerError(exc.code, exc.message, exc.status)


class ReplyLost(S2ClientError):
    """The request reached the service and was applied, but the connection dropped before the reply."""


class MemoryService:
    """The in-memory S2 service: one basin's worth of lite streams, stepped by the scheduler."""

    def __init__(self, sched: Scheduler, basin: str) -> None:
        self.sched = sched
        self.store = Store()
        self.store.ensure_basin(basin, None)
        self.basin = basin
        self._arrival = 0
        self._sessions: list[asyncio.Task[Any]] = []
        """The coroutines reading bulk append sessions' answers (ended with the schedule)."""
        self.connections = 0
        """How many HTTP/2 connections the clients opened (numbers them)."""
        self.drops: list[int] = []
        """How many sessions each connection drop ended."""

    def client_factory(self, cfg: S2Config) -> S2:
        """`ClientFactory` for the session pool: a client of this service."""
        del cfg
        return cast(S2, MemoryS2(self))

    async def end_sessions(self) -> None:
        """The schedule is over and its processes are gone: end the bulk append sessions still open (a dead
        process's, which nothing closes), as a process's death ends its connections."""
        open_ = [t for t in self._sessions if not t.done()]
        for task in open_:
            task.cancel()
        await asyncio.gather(*open_, return_exceptions=True)

    def stream(self, name: str) -> Stream:
        try:
            return self.store.stream(self.basin, name)
        except ApiError as exc:
            raise _sdk_error(exc) from None

    def apply_append(self, name: str, inp: AppendInput, opened: Stream | None = None) -> AppendAck:
        """Sequence one append as the lite server does; raises the SDK's error for a refused one."""
        try:
            stream, batch = self.sequence(name, append_input_to_proto(inp).SerializeToString(), opened)
        except ApiError as exc:
            raise _sdk_error(exc) from None
        return AppendAck(
            start=StreamPosition(batch.start, batch.ts0),
            end=StreamPosition(batch.end, batch.last_ts),
            tail=StreamPosition(stream.next_seq, stream.last_ts),
        )

    def sequence(self, name: str, data: bytes, opened: Stream | None = None) -> tuple[Stream, Batch]:
        """Sequence one serialized ``AppendInput`` as the lite server does (raises its `ApiError`); an append
        session's input goes to the stream it `opened` on, which a deletion ends (503, nothing applied)."""
        if opened is not None and opened.deleted:
            raise ApiError(503, "unavailable", "streamer missing in action")
        stream = opened if opened is not None else self.store.stream(self.basin, name)
        self._arrival += 1
        batch = stream.sequence(data, self._arrival)
        stream.make_visible(batch.end, batch.last_ts)
        return stream, batch

    async def step(self, op: Op) -> str:
        """A scheduling point; raises for a refusal (nothing applied)."""
        verdict = await self.sched.point(op)
        if verdict == "refuse" and op.kind == "session":
            raise S2ServerError("rate_limited", "simulated: rate limited, nothing applied", 429)
        if verdict == "refuse":
            raise S2ServerError("unavailable", "simulated: unavailable, nothing applied", 503)
        return verdict

    def after(self, verdict: str) -> None:
        """What follows an applied step: the reply is lost, or the caller's process dies."""
        if verdict == "ambiguous":
            raise ReplyLost("simulated: connection dropped after the request was applied")
        if verdict == "crash_after":
            Scheduler.crash_now()


def _describe(inp: AppendInput) -> str:
    """An SDK ``AppendInput`` in a trace line, as `_describe_message` shows a serialized one."""
    parts = [f"{len(inp.records)} rec"]
    first = inp.records[0]
    if first.headers and first.headers[0][0] == b"":
        parts = [f"{first.headers[0][1].decode()} {bytes(first.body).decode(errors='replace')}"]
    if inp.fencing_token is not None:
        parts.append(f"token={inp.fencing_token}")
    if inp.match_seq_num is not None:
        parts.append(f"match={inp.match_seq_num}")
    return " ".join(parts)


def _describe_message(data: bytes) -> str:
    """A serialized ``AppendInput`` in a trace line: its size (or command), token and condition."""
    msg = pb.AppendInput.FromString(data)
    parts = [f"{len(msg.records)} rec"]
    first = msg.records[0] if msg.records else None
    if first is not None and first.headers and first.headers[0].name == b"":
        parts = [f"{first.headers[0].value.decode()} {first.body.decode(errors='replace')}"]
    if msg.HasField("fencing_token"):
        parts.append(f"token={msg.fencing_token}")
    if msg.HasField("match_seq_num"):
        parts.append(f"match={msg.match_seq_num}")
    return " ".join(parts)


class MemoryS2:
    """Stands in for ``s2_sdk.S2``, and for its connection pool: the bulk sessions it carries share one
    HTTP/2 connection until that one is retired or drops (`tests.sim._connection`)."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service
        self._connection: MemoryConnection | None = None

    def checkout(self) -> MemoryConnection:
        """The connection a new request goes on (``ConnectionPool.checkout``): the open one, else a new."""
        if self._connection is None or self._connection.retired:
            self._service.connections += 1
            self._connection = MemoryConnection(self._service.connections)
        return self._connection

    def basin(self, name: str) -> MemoryBasin:
        assert name == self._service.basin, name
        return MemoryBasin(self._service)

    async def close(self) -> None:
        return None

    def _get_basin_client(self, name: str) -> MemoryTransport:
        assert name == self._service.basin, name
        return MemoryTransport(self._service, self)


class MemoryBasin:
    """Stands in for ``s2_sdk.S2Basin``."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service

    @property
    def name(self) -> str:
        return self._service.basin

    def stream(self, name: str) -> MemoryStream:
        return MemoryStream(self._service, name)

    async def list_all_streams(self, prefix: str = "") -> AsyncIterator[StreamInfo]:
        """The basin's streams whose names start with `prefix` (one scheduling point: a list call); one being
        deleted is listed with ``deleted_at``, as S2 lists it."""
        svc = self._service
        verdict = await svc.step(Op("list", prefix))
        streams = svc.store.basin(svc.basin).streams
        found = sorted((n, s.deleted_at is not None) for n, s in streams.items() if n.startswith(prefix))
        svc.after(verdict)
        for name, deleting in found:
            now = datetime.now(UTC)
            yield StreamInfo(name=name, created_at=now, deleted_at=now if deleting else None)

    async def get_stream_config(self, name: str) -> StreamConfig:
        """Nothing expires in a simulated schedule: every stream keeps its records forever."""
        self._service.stream(name)  # 404 / 409 as S2 answers them
        return StreamConfig(retention_policy="infinite")

    async def create_stream(self, name: str, config: object = None) -> None:
        del config  # retention: nothing expires in a simulated schedule
        svc = self._service
        verdict = await svc.step(Op("ensure", name))
        try:
            svc.store.create_stream(svc.basin, name, None)
        except ApiError as exc:
            raise _sdk_error(exc) from None
        svc.after(verdict)


class MemoryStream:
    """Stands in for ``s2_sdk.S2Stream``."""

    def __init__(self, service: MemoryService, name: str) -> None:
        self._service = service
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    async def check_tail(self) -> StreamPosition:
        svc = self._service
        verdict = await svc.step(Op("tail", self._name))
        seq, ts = svc.stream(self._name).tail()
        svc.after(verdict)
        return StreamPosition(seq, ts)

    async def append(self, inp: AppendInput) -> AppendAck:
        svc = self._service
        verdict = await svc.step(Op("append", self._name, _describe(inp)))
        ack = svc.apply_append(self._name, inp)
        svc.after(verdict)
        return ack

    async def read(
        self, *, start: SeqNum | TailOffset, limit: ReadLimit | None = None, clamp_to_tail: bool = False
    ) -> ReadBatch:
        svc = self._service
        back = isinstance(start, TailOffset)
        verdict = await svc.step(Op("read", self._name, f"{'tail-' if back else 'from '}{start.value}"))
        stream = svc.stream(self._name)
        count = limit.count if limit is not None and limit.count is not None else 1000
        params = ReadParams(
            seq_num=None if back else start.value,
            tail_offset=start.value if back else None,
            count=count,
            clamp=clamp_to_tail,
        )
        try:
            first = params.resolve_start(stream, can_follow=False)
        except ApiError as exc:
            raise _sdk_error(exc) from None
        res = stream.collect(first, min(count, 1000), _ONE_MIB, None)
        records = [sequenced_record_from_proto(pb.SequencedRecord.FromString(r)) for r in res.records]
        svc.after(verdict)
        return ReadBatch(records=records, tail=None)  # stored records carry no tail (s2-lite read.rs)


class MemoryTransport:
    """Stands in for the SDK's ``HttpClient`` of the basin, for the requests the bulk path makes on it: an
    S2S append session (``POST /v1/streams/{stream}/records``, ``content-type: s2s/proto``), a stream of
    the client's connection, and a unary append of one serialized ``AppendInput`` (the same path,
    ``application/x-protobuf``), one scheduler step as `MemoryStream.append` (refused, applied with its
    reply lost: the transport error of a reset HTTP/2 stream, or the process dies before or after it)."""

    def __init__(self, service: MemoryService, client: MemoryS2) -> None:
        self._service = service
        self._client = client

    async def unary_request(
        self, method: str, path: str, *, headers: dict[str, str] | None = None, content: bytes | None = None
    ) -> UnaryResponse:
        found = _RECORDS_PATH.fullmatch(path)
        ctype = (headers or {}).get("content-type")
        if method != "POST" or found is None or ctype != "application/x-protobuf" or content is None:
            raise AssertionError(f"the in-memory S2 answers only unary appends, not {method} {path}")
        svc, name = self._service, unquote(found.group(1))
        verdict = await svc.step(Op("append", name, _describe_message(content)))
        try:
            stream, batch = svc.sequence(name, content)
        except ApiError as exc:
            raise _sdk_error(exc) from None
        if verdict == "ambiguous":
            raise ProtocolError("Stream reset with error code 2", error_code=2)
        svc.after(verdict)
        return UnaryResponse(ack_for(stream, batch))

    @asynccontextmanager
    async def streaming_request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        content: AsyncIterator[bytes] | None = None,
        frame_signal: object = None,
    ) -> AsyncGenerator[AppendSessionResponse]:
        del params, frame_signal
        found = _RECORDS_PATH.fullmatch(path)
        ctype = (headers or {}).get("content-type")
        if method != "POST" or found is None or ctype != "s2s/proto" or content is None:
            raise AssertionError(f"the in-memory S2 answers only S2S append sessions, not {method} {path}")
        response = AppendSessionResponse(
            self._service, self._client.checkout(), unquote(found.group(1)), content
        )
        try:
            yield response
        finally:
            response.end()  # as the SDK's request ends: its sender stops, its stream leaves the connection


class UnaryResponse:
    """A unary answer: its body (the SDK raises for the others)."""

    def __init__(self, content: bytes) -> None:
        self.status_code = 200
        self.content = content


class AppendSessionResponse:
    """The response of an S2S append session, as the lite server gives it (`s2_sink.lite._appends`): each
    input message is sequenced in order and answered with its ``AppendAck`` frame; the first failure is a
    terminal frame (status and JSON error, `encode_terminal`) after the acks of earlier inputs, and
    nothing after it is applied; the session ends when the input ends. A missing stream is a 404 before
    any input.

    The client's messages reach the server as they are sent (a receiver drains the request body, as the
    SDK's sender writes it), and wait there to be answered. Each is one scheduler step (``session``),
    taken when the session answers it: refused (a 429 ``rate_limited`` terminal frame, nothing applied),
    applied with its reply lost (this stream is reset: a transport error), applied with S2's reconnect
    advice on its ack, the caller's process dies before or after it is applied, or the connection under
    the session drops (`tests.sim._connection`: every session on it ends, what each had in flight applied
    or not)."""

    def __init__(
        self, service: MemoryService, connection: MemoryConnection, stream: str, content: AsyncIterator[bytes]
    ) -> None:
        self._service = service
        self._connection = connection
        self._stream = stream
        self._content = content
        self._error: ApiError | None = None
        self._opened: Stream | None = None
        """The stream the session opened on: a deletion ends the session (503), whatever comes after."""
        try:
            self._opened = service.store.stream(service.basin, stream)
        except ApiError as exc:
            self._error = exc
        self.status_code = 200 if self._error is None else self._error.status
        self._stream_id = connection.open(self)
        self._received: deque[bytes] = deque()
        """Messages the server got and has not answered yet, oldest first."""
        self._answering: bytes | None = None
        """The message parked at its step."""
        self._arrived = asyncio.Event()
        self._input_ended = False
        self._bad_input: ApiError | None = None
        self._receiver: asyncio.Task[None] | None = None
        self._failure: TransportError | None = None
        """The connection dropped under the session: how the SDK reports it."""
        self.touched = False
        """The server processed one of its messages."""
        self._actor = ""
        """The simulated actor whose session it is (for the trace)."""

    async def aread(self) -> bytes:
        return self._error.body() if self._error is not None else b""

    def retire_connection(self) -> None:
        self._connection.retired = True  # the next session opens a fresh connection; this one goes on

    def end(self) -> None:
        """The request is over (answered, failed or abandoned)."""
        if self._receiver is not None:
            self._receiver.cancel()
        self._connection.close(self._stream_id)

    async def aiter_bytes(self) -> AsyncGenerator[bytes]:
        task = asyncio.current_task()
        if task is not None:
            self._service._sessions.append(task)
        actor = Scheduler.current()
        self._actor = actor.name if actor is not None else ""
        self._receiver = asyncio.get_running_loop().create_task(self._receive())
        while True:
            if self._failure is not None:
                raise self._failure
            if self._received:
                frame, last = await self._answer(self._received.popleft())
                yield frame
                if last:
                    return
            elif self._bad_input is not None:
                yield encode_terminal(self._bad_input)
                return
            elif self._input_ended:
                return
            else:
                self._arrived.clear()
                await self._arrived.wait()

    async def _receive(self) -> None:
        """Take the client's messages as it sends them."""
        reader = FrameReader()
        try:
            async for data in self._content:
                payloads, err = reader.feed(data)
                self._received.extend(payloads)
                if err is not None:
                    self._bad_input = err
                    return
                self._arrived.set()
            if reader.pending:
                self._bad_input = bad("bad_frame", "input ended inside a frame")
            self._input_ended = True
        finally:
            self._arrived.set()

    async def _answer(self, payload: bytes) -> tuple[bytes, bool]:
        """One input message's frame, and whether it ends the session."""
        svc = self._service
        self._answering = payload
        op = Op("session", self._stream, _describe_message(payload))
        verdict = await svc.sched.point(op, owner=self)
        self._answering = None
        if verdict == "drop" and self._failure is None:
            # This step's fault: the connection drops under every session on it, this one included.
            self._answering = payload
            ended, line = self._connection.drop(svc.sched.drops)
            svc.drops.append(ended)
            svc.sched.note(line)
            self._answering = None  # unless ended, this stream is at or below a GOAWAY's last: it goes on
        if self._failure is not None:
            raise self._failure
        if verdict == "refuse":
            refusal = ApiError(429, "rate_limited", "simulated: rate limited, nothing applied")
            return encode_terminal(refusal), True
        self.touched = True
        try:
            stream, batch = svc.sequence(self._stream, payload, self._opened)
        except ApiError as exc:
            return encode_terminal(exc), True
        if verdict == "ambiguous":
            # This stream alone fails (the server or a proxy resets it) after the append was applied.
            raise ProtocolError("Stream reset with error code 2", error_code=2)
        if verdict == "crash_after":
            Scheduler.crash_now()
        frame = encode_frame(ack_for(stream, batch))
        if verdict == "reconnect":
            frame = frame[:3] + bytes((frame[3] | _RECONNECT_ADVISED,)) + frame[4:]
        return frame, False

    # -- as the connection sees it (`tests.sim._connection.ConnectionStream`) ------------------------------

    def in_flight(self) -> int:
        return (self._answering is not None) + len(self._received)

    def fail(self, error: TransportError, applied: int) -> str:
        sent = [*([self._answering] if self._answering is not None else []), *self._received]
        self._answering = None
        self._received.clear()
        done = 0
        for payload in sent[:applied]:
            try:
                self._service.sequence(self._stream, payload, self._opened)
            except ApiError:
                break  # refused: the server ends the session there, nothing after it is applied
            done += 1
        self._failure = error
        if self._receiver is not None:
            self._receiver.cancel()  # nothing sent from now on reaches the server
        if not self._service.sched.interrupt(self, "drop"):
            self._arrived.set()  # waiting for input, not parked at a step
        return f"{self._actor} {self._stream} ({len(sent)} in flight, {done} applied)"
