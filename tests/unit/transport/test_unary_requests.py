"""A unary request (`sdk.post_unary`, `sdk.get_corked`) on a ready connection: no task of its own, its
HTTP/2 stream given back when its answer ends, bounded by the request timeout, its body sent whole past the
server's window, its answers' bytes acknowledged as they arrive, their header fields taken as sent."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from datetime import timedelta
from typing import Any

import h2.connection
import h2.errors
import pyarrow as pa
import s2_sdk
from s2_sdk import AppendAck, S2ClientError

from s2_sink._transport import h2_frames, sdk
from s2_sink._transport.append_session import append_once, basin_transport
from s2_sink._wire.append.proto import encode_append_inputs
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.unit.transport._odd_servers import answering, plain_http2_404, replying

ROWS = 10


def _message(rows: int = ROWS, size: int = 8) -> bytes:
    bodies = pa.array([f"{i:0{size}d}".encode() for i in range(rows)], pa.binary())
    return encode_append_inputs(bodies, None, None, [0, rows], fencing_token=None)[0]


def _client(endpoint: str, timeout_s: float = 60, token: str = "test") -> s2_sdk.S2:
    endpoints = s2_sdk.Endpoints(account=endpoint, basin=endpoint)
    return s2_sdk.S2(token, endpoints=endpoints, timeout=s2_sdk.Timeout(request=timedelta(seconds=timeout_s)))


def _ack_answer(records: int) -> tuple[list[tuple[str, str]], bytes]:
    ack = sdk.pb.AppendAck(start=sdk.pb.StreamPosition(seq_num=0), end=sdk.pb.StreamPosition(seq_num=records))
    return [(":status", "200"), ("content-type", "application/x-protobuf")], ack.SerializeToString()


def test_unary_appends_on_a_ready_connection_start_no_task_each(lite: LiteServer) -> None:
    """16 unary appends on a connected client start one task between them (their corked write), not one
    each, land once each, and give their HTTP/2 streams back when their answers end."""
    basin = fresh_basin(lite.endpoint)
    names = [f"unary/{i:02d}" for i in range(16)]

    async def main() -> tuple[int, list[AppendAck], int]:
        async with _client(lite.endpoint) as client:
            for name in names:
                await client.basin(basin).create_stream(name)
            transport = basin_transport(client, basin)
            (conn,) = list(sdk.pooled_connections(transport))
            loop = asyncio.get_running_loop()
            started: list[Any] = []

            def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
                started.append(coro)
                return asyncio.Task(coro, loop=loop, **kwargs)

            loop.set_task_factory(factory)
            try:
                acks = await asyncio.gather(*(append_once(transport, n, _message(), ROWS) for n in names))
            finally:
                loop.set_task_factory(None)
            return len(started), acks, len(conn._streams)

    tasks, acks, open_streams = asyncio.run(main())
    assert tasks <= 1, f"{tasks} tasks for 16 unary appends"
    assert [(a.start.seq_num, a.end.seq_num) for a in acks] == [(0, ROWS)] * 16
    assert open_streams == 0


def test_answers_beyond_the_connection_window_are_acknowledged_as_they_arrive(lite: LiteServer) -> None:
    """Unary reads whose answers add up to more than the connection's receive window (the SDK's 10 MiB)
    all complete: each answer's bytes are acknowledged to the server as they arrive."""
    basin = fresh_basin(lite.endpoint)
    big = b"x" * 100_000

    async def main() -> list[int]:
        async with _client(lite.endpoint, timeout_s=10) as client:
            stream = client.basin(basin).stream("big")
            await client.basin(basin).create_stream("big")
            await stream.append(s2_sdk.AppendInput(records=[s2_sdk.Record(body=big)] * 8))
            transport = basin_transport(client, basin)
            path = f"{sdk.stream_records_path('big')}?seq_num=0&count=8"
            headers = {"accept": "application/x-protobuf"}
            sizes = []
            for _ in range(14):  # ~11 MiB of answers
                sizes.append(len(await asyncio.wait_for(sdk.get_corked(transport, path, headers), 30)))
            return sizes

    sizes = asyncio.run(main())
    assert len(sizes) == 14
    assert all(s > 800_000 for s in sizes), sizes


def test_a_request_never_answered_times_out_and_gives_its_stream_back() -> None:
    """A unary append the server never answers fails after the request timeout, as a session's transport
    failure (an ``S2ClientError`` caused by the SDK's ``ReadTimeoutError``), and its HTTP/2 stream is given
    back."""
    with answering(lambda body: None) as endpoint:

        async def main() -> tuple[BaseException | AppendAck, int]:
            async with _client(endpoint, timeout_s=0.5) as client:
                transport = basin_transport(client, "b")
                outcome = await asyncio.wait_for(
                    asyncio.gather(append_once(transport, "s", _message(), ROWS), return_exceptions=True), 10
                )
                await asyncio.sleep(0)  # the stream is given back after the failure
                (conn,) = list(sdk.pooled_connections(transport))
                return outcome[0], len(conn._streams)

        outcome, open_streams = asyncio.run(main())
    assert isinstance(outcome, S2ClientError), outcome
    assert isinstance(outcome.__cause__, sdk.ReadTimeoutError), outcome.__cause__
    assert open_streams == 0


def test_requests_timed_out_are_let_go() -> None:
    """Unary appends the server never answers (it honours their resets: nothing more comes on their
    streams) time out and are let go: no request stays with the connection, its future and failure held."""
    with answering(lambda body: None) as endpoint:

        async def main() -> tuple[int, int, int, int]:
            async with _client(endpoint, timeout_s=0.2) as client:
                transport = basin_transport(client, "b")
                appends = [append_once(transport, f"s{i}", _message(), ROWS) for i in range(20)]
                mine = (o for o in gc.get_objects() if isinstance(o, sdk._Unary) and o.future in appends)
                requests = [weakref.ref(o) for o in mine]
                outcomes = await asyncio.wait_for(asyncio.gather(*appends, return_exceptions=True), 10)
                failed = sum(isinstance(o, S2ClientError) for o in outcomes)
                del appends, outcomes  # their failures' tracebacks hold the requests
                await asyncio.sleep(0)  # the streams are given back after the failures
                (conn,) = list(sdk.pooled_connections(transport))
                gc.collect()
                return len(requests), failed, len(conn._streams), sum(r() is not None for r in requests)

        assert asyncio.run(main()) == (20, 20, 0, 0)


def test_a_body_beyond_the_servers_window_is_sent_whole() -> None:
    """A unary append larger than the server's flow-control window (65,535 bytes) sends what the window
    takes at once and the rest as the server opens it: the server receives the whole message."""
    received: list[bytes] = []
    message = _message(rows=400, size=1000)
    assert len(message) > 3 * 65_535

    def answer(body: bytes) -> tuple[list[tuple[str, str]], bytes]:
        received.append(body)
        return _ack_answer(400)

    with answering(answer) as endpoint:

        async def main() -> AppendAck:
            async with _client(endpoint, timeout_s=10) as client:
                return await append_once(basin_transport(client, "b"), "s", message, 400)

        ack = asyncio.run(main())
    assert (ack.start.seq_num, ack.end.seq_num) == (0, 400)
    assert received == [message]


def test_a_header_block_beyond_the_servers_frame_size_is_continued() -> None:
    """A request whose header block is larger than the server's frame size (16 KiB, S2's too) goes as a
    HEADERS frame and CONTINUATION frames (RFC 9113, 4.2): the server reads it and answers."""
    with answering(lambda body: _ack_answer(ROWS)) as endpoint:

        async def main() -> AppendAck:
            async with _client(endpoint, timeout_s=10, token="Q" * 40_000) as client:
                return await append_once(basin_transport(client, "b"), "s", _message(), ROWS)

        ack = asyncio.run(main())
    assert (ack.start.seq_num, ack.end.seq_num) == (0, ROWS)


def test_an_answer_before_the_whole_body_closes_the_stream() -> None:
    """A server that answers a unary append before taking its whole body (a proxy's 404 on the headers,
    the server's window never opened) has the stream closed by the client (RST_STREAM, NO_ERROR: RFC 9113,
    8.1): no stream stays open at the server, counting against its limit."""
    open_streams: list[int] = []
    with plain_http2_404(open_streams) as endpoint:

        async def main() -> BaseException | AppendAck:
            async with _client(endpoint, timeout_s=10) as client:
                big = _message(rows=100, size=1000)  # beyond the server's window
                append = append_once(basin_transport(client, "b"), "s", big, 100)
                (outcome,) = await asyncio.gather(append, return_exceptions=True)
                for _ in range(100):  # the server's reads after the answer
                    if open_streams[-1:] == [0]:
                        break
                    await asyncio.sleep(0.02)
                return outcome

        outcome = asyncio.run(main())
    assert isinstance(outcome, s2_sdk.S2ServerError), outcome
    assert open_streams[-1] == 0


def test_answer_header_fields_are_taken_as_the_server_sends_them() -> None:
    """An answer with header fields h2 would reject (an upper-case name, a connection-specific header) is
    read for its status and body: the sink reads none of those fields, and S2 is the only server asked."""
    fields = [("X-Upper", "1"), ("connection", "keep-alive")]
    with answering(lambda body: (_ack_answer(ROWS)[0] + fields, _ack_answer(ROWS)[1])) as endpoint:

        async def main() -> AppendAck:
            async with _client(endpoint, timeout_s=10) as client:
                return await append_once(basin_transport(client, "b"), "s", _message(), ROWS)

        ack = asyncio.run(main())
    assert (ack.start.seq_num, ack.end.seq_num) == (0, ROWS)


def test_answers_header_blocks_decode_as_hpack_decodes_them_whatever_the_table() -> None:
    """A connection's decoder remembers blocks of indexed fields only (S2's repeated answer headers), and
    forgets them when a block may change the dynamic table: the same bytes then decode to the new entry,
    as hpack's own decoder says. h2's settings of the decoder's limits reach the decoder."""
    from hpack import Decoder, Encoder

    encoder, plain, answers = Encoder(), Decoder(), h2_frames.Answers(Decoder())
    first = encoder.encode([(":status", "200"), ("x-a", "1")])  # x-a added to the dynamic table
    again = encoder.encode([(":status", "200"), ("x-a", "1")])  # indexed fields only
    assert min(again) > 0x80, again
    other = encoder.encode([("x-b", "2")])  # x-b added in front: the index of x-a moves
    decoded = [answers.decode(b, raw=True) for b in (first, again, again, other, again)]
    assert decoded == [plain.decode(b, raw=True) for b in (first, again, again, other, again)]
    assert decoded[2] != decoded[4]  # the same bytes, another table
    assert (again, True) in answers._known
    answers.max_header_list_size = 1234
    assert answers._decoder.max_header_list_size == 1234


def _frames_of(h2c: h2.connection.H2Connection, sid: int, path: str) -> None:
    """Answer each stream of the unary requests below in another shape of frames HTTP/2 allows."""
    fields, ack = _ack_answer(ROWS)
    shape = path.split("/")[3]
    if shape == "padded":  # HEADERS padded and with a priority (h2 sends neither as a server), DATA padded
        headers = bytes([4]) + bytes(4) + bytes([15]) + h2c.encoder.encode(fields) + bytes(4)
        h2c._data_to_send += (
            len(headers).to_bytes(3) + bytes([1, 0x4 | 0x8 | 0x20]) + sid.to_bytes(4) + headers
        )
        data = bytes([9]) + ack + bytes(9)
        h2c._data_to_send += len(data).to_bytes(3) + bytes([0, 0x1 | 0x8]) + sid.to_bytes(4) + data
    elif shape == "continued":  # a header block beyond one frame: HEADERS, CONTINUATION
        h2c.send_headers(sid, [*fields, ("x-long", "v" * 20_000)])
        h2c.send_data(sid, ack, end_stream=True)
    elif shape == "trailers":  # the stream ends with trailers, not with its DATA
        h2c.send_headers(sid, fields)
        h2c.send_data(sid, ack)
        h2c.send_headers(sid, [("grpc-status", "0")], end_stream=True)
    elif shape == "unanswered":  # an error ended by its header block, continued beyond one frame
        h2c.send_headers(sid, [(":status", "404"), ("x-long", "v" * 20_000)], end_stream=True)
    elif shape == "reset":
        h2c.reset_stream(sid, h2.errors.ErrorCodes.REFUSED_STREAM)
    elif shape == "late":  # after the request timed out: its header block still updates the HPACK table
        time.sleep(1.0)
        h2c.send_headers(sid, [*fields, ("x-late", "1")])
        h2c.send_data(sid, ack, end_stream=True)
    else:
        h2c.send_headers(sid, [*fields, ("x-late", "1")])
        h2c.send_data(sid, ack, end_stream=True)


def test_answers_in_every_frame_shape_reach_their_requests_beside_h2s_own() -> None:
    """A unary request's answer is read from its frames whatever their shape (a priority, padding, a
    header block continued, trailers, an answer of headers only, a reset) while requests h2 sends itself
    (the SDK's) share the connection: each gets its own answer."""
    shapes = ["padded", "continued", "trailers", "unanswered", "reset", "plain"]
    with replying(_frames_of) as endpoint:

        async def main() -> list[Any]:
            async with _client(endpoint, timeout_s=10) as client:
                transport = basin_transport(client, "b")
                own = transport.unary_request("POST", "/v1/streams/plain/records", content=_message())
                ours = [append_once(transport, s, _message(), ROWS) for s in shapes for _ in range(3)]
                return await asyncio.wait_for(asyncio.gather(own, *ours, return_exceptions=True), 10)

        own, *outcomes = asyncio.run(main())
    assert own.status_code == 200
    assert own.content == _ack_answer(ROWS)[1]
    for shape, outcome in zip([s for s in shapes for _ in range(3)], outcomes, strict=True):
        if shape == "unanswered":
            assert isinstance(outcome, s2_sdk.S2ServerError), outcome
            assert outcome.status_code == 404
        elif shape == "reset":
            assert isinstance(outcome, S2ClientError), outcome
            assert isinstance(outcome.__cause__, sdk.ProtocolError), outcome.__cause__
            assert outcome.__cause__.error_code == h2.errors.ErrorCodes.REFUSED_STREAM
        else:
            assert isinstance(outcome, AppendAck), (shape, outcome)
            assert (outcome.start.seq_num, outcome.end.seq_num) == (0, ROWS)


def test_an_answer_after_its_request_timed_out_keeps_the_connection_readable() -> None:
    """The answer to a request that timed out still arrives; its header block added a field to the HPACK
    table, which the next answer refers to: that answer reads right on the same connection."""
    with replying(_frames_of) as endpoint:

        async def main() -> tuple[BaseException | AppendAck, AppendAck, int]:
            async with _client(endpoint, timeout_s=0.3) as client:
                transport = basin_transport(client, "b")
                late = await asyncio.gather(
                    append_once(transport, "late", _message(), ROWS), return_exceptions=True
                )
                await asyncio.sleep(1.5)
                transport._request_timeout = 10
                after = await append_once(transport, "next", _message(), ROWS)
                return late[0], after, len(list(sdk.pooled_connections(transport)))

        late, after, connections = asyncio.run(main())
    assert isinstance(late, S2ClientError), late
    assert (after.start.seq_num, after.end.seq_num) == (0, ROWS)
    assert connections == 1
