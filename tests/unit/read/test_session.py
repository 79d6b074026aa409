"""Bulk range reads of the s2 source against the lite server: the SDK's records, as columns."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator

import pyarrow as pa
import pytest
import s2_sdk
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from s2_sink import ReadError
from s2_sink._read import session as _session
from s2_sink._read.rows.schemas import KAFKA_SCHEMA, RAW_SCHEMA
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._wire.read_batch import parse_read_batch
from s2_sink.config import S2Config
from s2_sink.datasource._readers import columns_to_batch
from s2_sink.lite import LiteServer
from tests.rows_by_record import records_to_batch, to_records
from tests.unit.wire.test_read_batch import _message, records


def _cfg(endpoint: str, basin: str) -> S2Config:
    return S2Config(basin=basin, account_endpoint=endpoint, basin_endpoint=endpoint)


def _append(endpoint: str, basin: str, stream: str, batches: list[list[s2_sdk.Record]]) -> None:
    _appends(endpoint, basin, {stream: batches})


def _appends(endpoint: str, basin: str, streams: dict[str, list[list[s2_sdk.Record]]]) -> None:
    """Each stream's batches appended in turn, on one client (each new client parses the CA bundle)."""

    async def go() -> None:
        async with s2_sdk.S2("test", endpoints=s2_sdk.Endpoints(account=endpoint, basin=endpoint)) as s2:
            for stream, batches in streams.items():
                for recs in batches:
                    await s2.basin(basin).stream(stream).append(s2_sdk.AppendInput(records=recs))

    asyncio.run(go())


def _sdk_records(
    endpoint: str, basin: str, stream: str, first: int, stop: int
) -> list[s2_sdk.SequencedRecord]:
    """The oracle: what the SDK's own read session gives for ``[first, stop)``."""

    async def go() -> list[s2_sdk.SequencedRecord]:
        async with s2_sdk.S2("test", endpoints=s2_sdk.Endpoints(account=endpoint, basin=endpoint)) as s2:
            handle = s2.basin(basin).stream(stream)
            limit = s2_sdk.ReadLimit(count=stop - first)
            async with handle.read_session(start=s2_sdk.SeqNum(first), limit=limit) as session:
                return [r async for batch in session for r in batch.records if r.seq_num < stop]

    return asyncio.run(go())


def _no_gap(first: int, stop: int) -> None:
    raise AssertionError(f"unexpected gap [{first}, {stop})")


def test_bulk_range_reads_give_the_sdks_records(lite: LiteServer, basin: str) -> None:
    """A range read in bulk -- several ReadBatch messages, headers, binary and empty bodies, a fence
    command record -- gives, record for record, what the SDK's read session gives, for the whole stream
    and for a range that starts and ends inside it."""
    big = [
        s2_sdk.Record(body=bytes([i % 256]) * 600, headers=[(b"k", str(i).encode()), (b"\x00\xff", b"")])
        for i in range(1500)
    ]
    odd = [s2_sdk.Record(body=b""), s2_sdk.Record(body="é✓".encode(), headers=[(b"n", b"v")])]
    _append(
        lite.endpoint,
        basin,
        "s",
        [big[:700], big[700:1400], big[1400:], odd, [s2_sdk.CommandRecord.fence("f")], odd],
    )
    cfg = _cfg(lite.endpoint, basin)
    for first, stop in ((0, 1505), (3, 1503), (699, 701)):
        sdk = _sdk_records(lite.endpoint, basin, "s", first, stop)
        batches = list(_session.read_range_columns(cfg, "s", first, stop, _no_gap))
        assert [r for cols in batches for r in to_records(cols)] == sdk
        assert len(sdk) == stop - first
    # Runs of one message each (the default joins them): records come message by message, the same ones.
    per_message = list(_session.read_range_columns(cfg, "s", 0, 1505, _no_gap, run_records=1))
    assert len(per_message) > 1
    assert [r for cols in per_message for r in to_records(cols)] == _sdk_records(
        lite.endpoint, basin, "s", 0, 1505
    )


def test_read_connections_accept_frames_of_a_whole_read_batch(lite: LiteServer, basin: str) -> None:
    """A range read tells its connection's server it accepts DATA frames of 1 MiB (HTTP/2's default is
    16 KiB, a frame per hundred records); the server acknowledges it, and what is read stays whole."""
    records = [s2_sdk.Record(body=bytes([i % 256]) * 1000) for i in range(3000)]
    _append(lite.endpoint, basin, "s", [records[i : i + 1000] for i in range(0, 3000, 1000)])
    # A token of its own: a client (and connections) of its own in the process-wide pool.
    cfg = S2Config(
        basin=basin, account_endpoint=lite.endpoint, basin_endpoint=lite.endpoint, access_token=basin
    )
    for _ in range(2):  # the first read advertises on a new connection, the second reuses it
        got = [
            r.body
            for cols in _session.read_range_columns(cfg, "s", 0, 3000, _no_gap)
            for r in to_records(cols)
        ]
        assert got == [r.body for r in records]

    async def frame_sizes() -> list[int]:
        http = get_pool().client(cfg).basin(basin).stream("s")._client
        return [pc._conn._h2.local_settings.max_frame_size for pc in http._pool._hosts[http._base_url]]

    assert _runtime.run(frame_sizes()) == [1 << 20]


def test_bulk_reads_of_a_missing_stream_raise_read_error(lite: LiteServer, basin: str) -> None:
    """Reading a stream that does not exist raises ReadError naming the stream, the range and the basin,
    with the SDK's error chained."""
    with pytest.raises(ReadError, match=rf"reading 'gone' seq_nums \[0, 5\) in basin '{basin}'") as info:
        list(_session.read_range_columns(_cfg(lite.endpoint, basin), "gone", 0, 5, _no_gap))
    assert isinstance(info.value.__cause__, s2_sdk.S2Error)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.lists(records, max_size=8))
def test_raw_and_kafka_batches_from_columns_equal_those_from_records(
    recs: list[s2_sdk.SequencedRecord],
) -> None:
    """The raw format built column by column, and the kafka format built through record objects, equal
    what the record path builds from the SDK's records, for the full schemas and a projection."""
    # Positions Spark can hold (both paths fail on larger ones).
    recs = [s2_sdk.SequencedRecord(r.seq_num % 2**63, r.body, r.headers, r.timestamp % 2**50) for r in recs]
    cols, _ = parse_read_batch(_message(recs, None))
    for fmt, schema in (("raw", RAW_SCHEMA), ("kafka", KAFKA_SCHEMA)):
        assert columns_to_batch(fmt, schema, [("st", cols)]).equals(records_to_batch(fmt, schema, "st", recs))
    subset = type(RAW_SCHEMA)([RAW_SCHEMA["body"], RAW_SCHEMA["seq_num"], RAW_SCHEMA["headers"]])
    assert columns_to_batch("raw", subset, [("st", cols)]).equals(records_to_batch("raw", subset, "st", recs))


def test_a_timestamp_past_what_spark_holds_fails_on_both_paths() -> None:
    """A timestamp whose microseconds overflow int64 is refused column by column as record by record,
    never wrapped into a wrong time."""
    recs = [s2_sdk.SequencedRecord(0, b"x", [], 2**62)]
    cols, _ = parse_read_batch(_message(recs, None))
    with pytest.raises((pa.ArrowInvalid, OverflowError)):
        columns_to_batch("raw", RAW_SCHEMA, [("st", cols)])
    with pytest.raises((pa.ArrowInvalid, OverflowError)):
        records_to_batch("raw", RAW_SCHEMA, "st", recs)


@contextlib.contextmanager
def _proxy(
    target: str, to_client: Callable[[socket.socket, socket.socket, int], None]
) -> Iterator[tuple[str, list[int]]]:
    """A TCP proxy to ``target``: the client's bytes forwarded as they come, the server's by ``to_client``
    (given the connection's number). Yields its endpoint and the connection count."""
    host, port = target.removeprefix("http://").split(":")
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def to_server(client: socket.socket, upstream: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                with contextlib.suppress(OSError):  # after a cut: drained, not forwarded
                    upstream.sendall(data)
        client.close()
        upstream.close()

    def serve() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            upstream = socket.create_connection((host, int(port)))
            threading.Thread(target=to_client, args=(upstream, client, len(accepted)), daemon=True).start()
            threading.Thread(target=to_server, args=(client, upstream), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        listener.close()


@contextlib.contextmanager
def _cutting_proxy(target: str, cut_after: int) -> Iterator[tuple[str, list[int]]]:
    """A TCP proxy to ``target`` that closes its first connection once ``cut_after`` bytes went from the
    server to the client; later connections pass through. Yields its endpoint and the connection count."""

    def to_client(upstream: socket.socket, client: socket.socket, nth: int) -> None:
        budget = cut_after if nth == 1 else None
        sent = 0
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                client.sendall(data)
                sent += len(data)
                if budget is not None and sent >= budget:
                    break
        # The client gets a FIN after every byte forwarded. Not a close: the client's socket stays open for
        # `to_server` to drain, because closing a socket that holds unread bytes sends a reset, and a
        # reset makes the client's kernel drop what the client has not read yet (so would a close while
        # `to_server` is blocked in recv: the reset would wait until the client sent something).
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)
        upstream.close()

    with _proxy(target, to_client) as proxied:
        yield proxied


def test_a_connection_dropped_mid_read_resumes_after_the_last_record(lite: LiteServer, basin: str) -> None:
    """When the connection dies in the middle of a range read, the session retries on a new connection
    from the record after the last one delivered: every record arrives once, in order. With retries
    off, the same fault fails the read with ReadError."""
    records = [s2_sdk.Record(body=f"{i:05d}".encode() * 120) for i in range(5000)]
    _append(lite.endpoint, basin, "s", [records[i : i + 1000] for i in range(0, 5000, 1000)])
    # About 3 MB of records; DATA frames and ReadBatch messages of at most 1 MiB: the first of each has
    # arrived whole when the cut comes.
    with _cutting_proxy(lite.endpoint, cut_after=2_000_000) as (endpoint, accepted):
        got: list[bytes] = []
        before_cut = 0  # records delivered on the first connection: a resume from 0 would repeat them
        # Runs of one message each, so that what the first connection brought is handed out before the cut.
        for cols in _session.read_range_columns(_cfg(endpoint, basin), "s", 0, 5000, _no_gap, run_records=1):
            got.extend(r.body for r in to_records(cols))
            if len(accepted) == 1:
                before_cut = len(got)
    assert got == [r.body for r in records]
    assert len(accepted) >= 2
    assert 0 < before_cut < 5000
    # In runs longer than the read, what the first connection brought waits in the run across the retry.
    with _cutting_proxy(lite.endpoint, cut_after=2_000_000) as (endpoint, accepted):
        runs = list(
            _session.read_range_columns(_cfg(endpoint, basin), "s", 0, 5000, _no_gap, run_records=10_000)
        )
    assert len(accepted) >= 2
    assert len(runs) == 1
    assert [r.body for r in to_records(runs[0])] == [r.body for r in records]
    # Without retries the same cut fails the read, as ReadError naming the stream and the basin.
    with _cutting_proxy(lite.endpoint, cut_after=2_000_000) as (endpoint, _):
        cfg = S2Config(
            basin=basin,
            account_endpoint=endpoint,
            basin_endpoint=endpoint,
            max_retries=0,
            delivery_timeout_ms=0,
        )
        with pytest.raises(ReadError, match=rf"reading 's' seq_nums \[0, 5000\) in basin '{basin}'"):
            list(_session.read_range_columns(cfg, "s", 0, 5000, _no_gap))


def test_records_come_in_runs_of_whole_messages(lite: LiteServer, basin: str) -> None:
    """A range read hands out its records in runs of whole ReadBatch messages holding at least
    ``run_records`` records (the last run holds what is left), in order, each record once."""
    _append(lite.endpoint, basin, "s", [[s2_sdk.Record(body=b"{}")] * 700 for _ in range(30)])
    runs = list(
        _session.read_range_columns(_cfg(lite.endpoint, basin), "s", 0, 30 * 700, _no_gap, run_records=2000)
    )
    sizes = [len(r) for r in runs]
    # A message holds at most 1000 records, so a run stops within one message past the threshold.
    assert all(2000 <= n < 3000 for n in sizes[:-1]), sizes
    assert 0 < sizes[-1] < 3000
    assert [int(s) for r in runs for s in r.seq_nums] == list(range(30 * 700))


def test_many_ranges_read_once_each_and_stop_when_the_reader_does(lite: LiteServer, basin: str) -> None:
    """Ranges of 60 streams read several at a time: each range's records once, in seq_num order within
    the range; a caller that stops after the first run ends the sessions (no reader is left handing over
    to a queue nobody empties) and the next read of the same ranges on the same loop is whole."""
    names = [f"r/{i:02d}" for i in range(60)]
    _appends(
        lite.endpoint,
        basin,
        {n: [[s2_sdk.Record(body=f"{n}:{j}".encode()) for j in range(30)]] for n in names},
    )
    cfg = _cfg(lite.endpoint, basin)
    ranges = [(name, 5, 25) for name in names]

    def read_all() -> dict[str, list[int]]:
        got: dict[str, list[int]] = {}
        for stream, cols in _session.read_ranges_columns(
            cfg, ranges, lambda _, lo, hi: _no_gap(lo, hi), concurrency=4
        ):
            got.setdefault(stream, []).extend(cols.seq_nums.tolist())
        return got

    assert read_all() == {name: list(range(5, 25)) for name in names}
    for _ in range(3):
        runs = _session.read_ranges_columns(cfg, ranges, lambda _, lo, hi: _no_gap(lo, hi), concurrency=4)
        next(runs)
        runs.close()  # returns once every reader has ended
    assert read_all() == {name: list(range(5, 25)) for name in names}


def test_a_record_that_does_not_decode_among_many_streams_names_its_stream(
    lite: LiteServer, basin: str
) -> None:
    """Small streams' records are converted to rows together; a body that does not decode into the schema
    fails the read naming its own stream, not the batch's other streams."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from s2_sink._read.partition import S2Partition
    from s2_sink.datasource._readers import read_partition

    names = [f"j/{i:02d}" for i in range(12)]
    good_rows = {n: [[s2_sdk.Record(body=b'{"n": %d}' % j) for j in range(3)]] for n in names}
    bad_rows = [[s2_sdk.Record(body=b'{"n": 1}'), s2_sdk.Record(body=b"not json")]]
    _appends(lite.endpoint, basin, {**good_rows, "j/bad": bad_rows})
    schema = StructType([StructField("n", LongType()), StructField("_s2_stream", StringType())])
    good = S2Partition([(name, 0, 3) for name in names])
    rows = [
        r
        for b in read_partition(_cfg(lite.endpoint, basin), "json", schema, good, on_loss="fail")
        for r in b.to_pylist()
    ]
    assert sorted((r["_s2_stream"], r["n"]) for r in rows) == [(name, j) for name in names for j in range(3)]
    bad = S2Partition(
        [*((name, 0, 3) for name in names[:6]), ("j/bad", 0, 2), *((name, 0, 3) for name in names[6:])]
    )
    with pytest.raises(ReadError, match=r"stream 'j/bad'") as info:
        list(read_partition(_cfg(lite.endpoint, basin), "json", schema, bad, on_loss="fail"))
    assert "j/00" not in str(info.value)


def test_a_session_silent_past_the_heartbeat_timeout_fails_and_messages_in_time_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Messages that arrive within the heartbeat timeout are handed on, in order; silence longer than it
    is a ReadTimeoutError (retried by the session as the SDK's is), not a wait for ever."""
    monkeypatch.setattr(_session, "_HEARTBEAT_TIMEOUT", 0.2)

    async def arriving(stall: float) -> AsyncIterator[object]:
        for i in range(3):
            await asyncio.sleep(0.01)
            yield i
        await asyncio.sleep(stall)
        yield 3

    async def collect(stall: float) -> list[object]:
        return [m async for m in _session._within_heartbeats(arriving(stall))]  # type: ignore[arg-type]

    assert asyncio.run(collect(0.01)) == [0, 1, 2, 3]
    with pytest.raises(_session.ReadTimeoutError):
        asyncio.run(collect(5.0))


def test_frames_of_the_larger_size_read_with_the_servers_ack_keep_the_connection(
    lite: LiteServer, basin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A range read advertises larger frames once it has begun; the server acknowledges them and sends the
    frames that follow at that size. A reader that takes the ACK and such a frame in one read (a busy one;
    here a proxy hands them over together) reads on, on the one connection, with no failure retried."""
    # Past the connection's flow-control window, in messages smaller than one socket read: the server
    # still has messages to send after the ACK, and a whole one fits in the read with it.
    batches = [
        [s2_sdk.Record(body=f"{n:026d}".encode()) for n in range(b, b + 1000)]
        for b in range(0, 330_000, 1000)
    ]
    _append(lite.endpoint, basin, "s", batches)
    with _ack_joining_proxy(lite.endpoint) as (endpoint, accepted):
        cfg = S2Config(basin=basin, account_endpoint=endpoint, basin_endpoint=endpoint, access_token=basin)
        with caplog.at_level(logging.WARNING, logger="s2_sink"):
            runs = list(_session.read_range_columns(cfg, "s", 0, 330_000, _no_gap))
    assert [int(n) for cols in runs for n in cols.seq_nums] == list(range(330_000))
    assert [r.getMessage() for r in caplog.records] == []
    assert len(accepted) == 1


@contextlib.contextmanager
def _ack_joining_proxy(target: str) -> Iterator[tuple[str, list[int]]]:
    """A TCP proxy to ``target`` that forwards the server's HTTP/2 frames whole, and each SETTINGS ACK with
    the frame after it, in one write after a pause (so that the client reads them in one chunk). Yields
    its endpoint and the connection count."""

    def to_client(upstream: socket.socket, client: socket.socket, nth: int) -> None:
        buf, held = bytearray(), b""
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                buf += data
                while len(buf) >= 9 and len(buf) >= 9 + int.from_bytes(buf[:3], "big"):
                    n = 9 + int.from_bytes(buf[:3], "big")
                    frame, buf = bytes(buf[:n]), buf[n:]
                    if frame[3] == 4 and frame[4] & 1 and not held:  # an ACK: held for the next frame
                        held = frame
                        continue
                    if held:
                        time.sleep(0.05)  # the client has read all before: the two come in one read
                    client.sendall(held + frame)
                    held = b""
        with contextlib.suppress(OSError):
            client.shutdown(socket.SHUT_WR)
        upstream.close()

    with _proxy(target, to_client) as proxied:
        yield proxied
