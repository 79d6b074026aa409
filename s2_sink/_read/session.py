"""A task's S2 reads: the ranges of its partition, several at once, each on an S2S read session of our own
or, if small, by one unary read; records trimmed away reported as gaps; runs of records handed on as record
columns (`s2_sink._wire.read_batch` decodes them together).

The session keeps the SDK's HTTP/2 transport and S2S deframing, and behaves as the SDK's bounded session
does (heartbeats, reconnects, resume, errors). docs/architecture.md, *Reading, by stage*.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Generator, Iterator, Sequence
from typing import Final, TypeVar

import numpy as np
import s2_sdk
from h2.connection import H2Connection
from h2.settings import SettingCodes

from s2_sink._transport import hyperframe_repr_patch, sdk
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.explain import explain
from s2_sink._transport.retry import DEFAULT_PATIENCE, Patience, Retrying
from s2_sink._transport.sdk import (
    AdvisedReconnectLimiter,
    HttpClient,
    Message,
    ReadTimeoutError,
    S2ClientError,
    TransportError,
    parse_error_info,
    read_messages,
    requires_reconnect,
)
from s2_sink._wire.columns import Positions, RecordColumns
from s2_sink._wire.read_batch import Arrival, Held, ReadRun, decode_held
from s2_sink.config import S2Config
from s2_sink.errors import ReadError

__all__ = [
    "RANGE_CONCURRENCY",
    "RUN_BYTES",
    "RUN_RECORDS",
    "UNARY_RECORDS",
    "Range",
    "missing",
    "read_columns",
    "read_error_words",
    "read_range_columns",
    "read_ranges_columns",
    "read_unary",
]

_T = TypeVar("_T")

log = logging.getLogger(__name__)

hyperframe_repr_patch.install()  # h2 would hex-encode every DATA frame it receives (see that module)

RUN_RECORDS: Final = 8192
RUN_BYTES: Final = 8 * 1024 * 1024
"""Records are handed out in runs of about this many records (or bytes of messages): a ReadBatch holds at most
1000 records, and decoding several together, then Arrow's JSON reader and the per-batch numpy passes of the
formats, cost less per record on longer runs; each run is also one hand-off from the event loop's thread."""

_HEARTBEAT_TIMEOUT: Final = 20.0  # seconds, as the SDK's session
_MAX_FRAME_SIZE: Final = 1 << 20
"""The DATA frame size a read connection accepts. Every frame costs h2 and the SDK's transport Python work
(parsing, an event, a queue hand-off, a flow-control ack), and at HTTP/2's default of 16 KiB a frame holds
about a hundred records. A ReadBatch is at most 1 MiB, so a frame of 1 MiB carries a whole one. RFC 9113
lets a receiver advertise up to 16 MiB - 1; the windows (10 MiB, the SDK's) still bound what is in flight."""


async def read_columns(
    handle: s2_sdk.S2Stream,
    first: int,
    count: int,
    *,
    run_records: int = RUN_RECORDS,
    run_bytes: int = RUN_BYTES,
    cfg: S2Config | None = None,
) -> AsyncGenerator[Held, None]:
    """The records from seq_num ``first`` on, at most ``count``, in runs of whole messages not decoded yet,
    each handed out at ``run_records`` records or ``run_bytes`` bytes. Ends at the count or the tail, like a
    bounded SDK session; a failed session resumes after the last record, until ``cfg``'s deadline."""
    client = sdk.stream_transport(handle)
    headers = _request_headers(handle)
    retrying: Retrying | None = None  # made on the first failure: a read that never fails needs none
    reconnects = AdvisedReconnectLimiter()
    next_seq, remaining = first, count
    run = ReadRun()  # records already received stay in it across retries: the session resumes after them
    while remaining > 0:
        params = {"seq_num": next_seq, "count": remaining}
        reconnect = False
        try:
            async with client.streaming_request(
                "GET", sdk.stream_records_path(handle.name), params=params, headers=headers
            ) as response:
                if response.status_code != 200:
                    raise parse_error_info(await response.aread(), response.status_code)
                await _advertise_large_frames(client)
                advice_seen = False
                async for message in _within_heartbeats(read_messages(response.aiter_bytes())):
                    if retrying is not None:
                        retrying.progress()
                    if message.reconnect_advised and not advice_seen:  # act on the first advice only
                        advice_seen = True
                        response.retire_connection()
                        reconnect = reconnects.try_acquire_advised_reconnect()
                    next_seq, remaining = _resume_point(run.add(message.body), remaining)
                    if run.records >= run_records or run.size >= run_bytes:
                        yield run.take()
                    if reconnect:
                        break
            if not reconnect:
                break
        except (s2_sdk.S2Error, TransportError) as exc:
            if requires_reconnect(exc):  # the server drains or retired the connection: at once, elsewhere
                if remaining == 0:
                    break
                reconnects.record_reconnect()
                continue
            retrying = retrying or _retrying(handle, first, cfg)
            await retrying.after(exc)
    if run.records:
        yield run.take()


UNARY_RECORDS: Final = 1000
"""The most records a unary read answers with (S2's ``RECORD_BATCH_MAX``): a range of at most this many is
read by one (unless its records pass 1 MiB)."""


async def read_unary(
    handle: s2_sdk.S2Stream, first: int, count: int, cfg: S2Config | None = None
) -> Held | None:
    """The records from ``first`` on, at most ``count`` (<= `UNARY_RECORDS`), as far as one unary read answers
    (a protobuf ``ReadBatch``), held; None if it has none. What it leaves (records past 1 MiB) the caller
    reads with a session. As S2 answers (``lite/src/handlers/v1/records.rs``): it never waits; a start below
    the trim point reads what is left; a start at or past the tail is a 416 (``ReadUnwrittenError``)."""
    transport = sdk.stream_transport(handle)
    path = f"{sdk.stream_records_path(handle.name)}?seq_num={first}&count={min(count, UNARY_RECORDS)}"
    headers = _request_headers(handle, _PROTOBUF)
    retrying: Retrying | None = None  # made on the first failure, as a session's
    while True:
        try:
            answer = await sdk.get_corked(transport, path, headers)
            break
        except Exception as exc:  # noqa: BLE001 - `after` re-raises what is final or past the deadline
            retrying = retrying or _retrying(handle, first, cfg)
            await retrying.after(exc)
    run = ReadRun()
    run.add(answer)
    return run.take() if run.records else None


def _retrying(handle: s2_sdk.S2Stream, first: int, cfg: S2Config | None) -> Retrying:
    patience = DEFAULT_PATIENCE if cfg is None else Patience.of(cfg)
    return Retrying(patience, f"reading {handle.name!r} from seq_num {first}")


def _resume_point(arrival: Arrival, remaining: int) -> tuple[int, int]:
    """Where a session resumes after a message, and how many records it still wants."""
    if arrival.last_seq_num is not None:
        return arrival.last_seq_num + 1, max(remaining - arrival.records, 0)
    if arrival.tail is not None:
        return arrival.tail.seq_num, remaining  # a heartbeat: the server is at the tail
    raise S2ClientError("Read session received an empty batch without a tail")


async def _advertise_large_frames(client: HttpClient) -> None:
    """Advertise `_MAX_FRAME_SIZE` once on each of the client's connections that does not yet."""
    try:
        for conn in sdk.pooled_connections(client):
            h2c = sdk.h2_state(conn)
            if h2c is None or h2c in _advertised:
                continue
            _advertised.add(h2c)
            await sdk.advertise_settings(conn, {SettingCodes.MAX_FRAME_SIZE: _MAX_FRAME_SIZE})
    except AttributeError:  # another SDK's internals: reads still work, on 16 KiB frames
        log.debug("cannot reach the SDK's connections to advertise larger frames", exc_info=True)


_advertised: weakref.WeakSet[H2Connection] = weakref.WeakSet()
"""The HTTP/2 state of connections already told, for as long as they live."""


async def _within_heartbeats(messages: AsyncIterator[Message]) -> AsyncGenerator[Message, None]:
    """``messages``, failing with ReadTimeoutError when none arrives in time. A timeout scope, not
    ``wait_for``, which costs a task per message (Python 3.11)."""
    while True:
        try:
            async with asyncio.timeout(_HEARTBEAT_TIMEOUT):
                message = await anext(messages)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise ReadTimeoutError("Read session heartbeat timeout") from None
        yield message


_S2S: Final = {"content-type": "s2s/proto"}
_PROTOBUF: Final = {"accept": "application/x-protobuf"}
"""A unary read's answer as a protobuf ``ReadBatch`` (the SDK's unary read asks the same)."""


def _request_headers(handle: s2_sdk.S2Stream, kind: dict[str, str] = _S2S) -> dict[str, str]:
    headers = dict(kind)
    key = sdk.encryption_key(handle)
    if key is not None:
        headers[sdk.ENCRYPTION_KEY_HEADER] = key
    return headers


def read_error_words(exc: BaseException, cfg: S2Config, stream: str | None = None) -> str:
    if isinstance(exc, s2_sdk.ReadUnwrittenError):
        return str(exc)  # a position past the tail: callers look at the cause, it is no failure to explain
    return explain(
        exc, cfg, stream=stream, stream_fix="check s2.stream / s2.streams / s2.stream-prefix"
    ).message


Range = tuple[str, int, int]
"""``(stream, first, stop)``: the records of ``stream`` with ``first <= seq_num < stop`` (planned by
`planning.offsets`, read here)."""


async def _range_runs(
    cfg: S2Config, stream: str, first: int, stop: int, on_gap: Callable[[int, int], None], *, run_records: int
) -> AsyncGenerator[Held, None]:
    handle = _runtime.get_pool().client(cfg).basin(cfg.basin).stream(stream)
    # seq_nums are contiguous (command records included), so a jump past ``expected`` means trimmed records.
    expected = first
    try:
        async for held in _held_runs(handle, first, stop, run_records, cfg):
            if held.last_seq_num - expected + 1 == held.records and held.last_seq_num < stop:
                # As many records as seq_nums up to the last, all below ``stop``: no jump, nothing to cut,
                # and the run stays undecoded for the consumer to decode with others.
                expected = held.last_seq_num + 1
                yield held
                if expected >= stop:
                    return
                continue
            (batch,) = decode_held([held])
            for lo, hi in missing(batch.seq_nums, expected, stop):
                on_gap(lo, hi)
            expected = int(batch.seq_nums[-1]) + 1
            # Trimmed records shift what the count covers: keep only [first, stop).
            kept = batch.take(batch.seq_nums < stop) if expected > stop else batch
            if len(kept):
                yield Held.of(kept)
            if expected >= stop:
                return
    except s2_sdk.ReadUnwrittenError:
        # The start resolved to the tail: everything from ``expected`` on was trimmed.
        pass
    if expected < stop:
        on_gap(expected, stop)


async def _held_runs(
    handle: s2_sdk.S2Stream, first: int, stop: int, run_records: int, cfg: S2Config
) -> AsyncGenerator[Held, None]:
    """A small range by one unary read (batched with the task's other small ranges), the rest by a session."""
    if stop - first <= UNARY_RECORDS:
        held = await read_unary(handle, first, stop - first, cfg)
        if held is None:
            return  # no records: none is left from ``first`` to the tail
        yield held
        if held.last_seq_num + 1 >= stop:
            return
        # More than one answer holds (records over 1 MiB together): a session reads the rest.
        first = held.last_seq_num + 1
    async for held in read_columns(handle, first, stop - first, run_records=run_records, cfg=cfg):
        yield held


def missing(seq_nums: Positions, expected: int, stop: int) -> list[tuple[int, int]]:
    """The runs ``[lo, hi)`` below ``stop`` that ``seq_nums`` skips after ``expected``: records trimmed."""
    after = np.empty(len(seq_nums), dtype=np.uint64)  # the seq_num each record should have
    after[0] = expected
    after[1:] = seq_nums[:-1] + np.uint64(1)
    jumps = np.flatnonzero(seq_nums > after)
    return [
        (lo, min(hi, stop))
        for lo, hi in zip(after[jumps].tolist(), seq_nums[jumps].tolist(), strict=True)
        if lo < stop
    ]


RANGE_CONCURRENCY: Final = 16
"""Ranges of one task read at once, each on its own session (HTTP/2 streams of the pooled connections):
a task that reads many small streams waits for one round trip per stream otherwise."""


async def _read_one(
    cfg: S2Config,
    rng: Range,
    on_gap: Callable[[int, int], None],
    run_records: int,
    out: asyncio.Queue[object],
) -> None:
    stream, first, stop = rng
    try:
        async for held in _range_runs(cfg, stream, first, stop, on_gap, run_records=run_records):
            await out.put((stream, held))
    except (s2_sdk.S2Error, TransportError) as exc:
        raise ReadError(
            f"s2 source: reading {stream!r} seq_nums [{first}, {stop}) in basin {cfg.basin!r} failed: "
            f"{read_error_words(exc, cfg, stream)}"
        ) from exc


async def _ranges_columns(
    cfg: S2Config,
    ranges: Sequence[Range],
    on_gap: Callable[[str, int, int], None],
    *,
    run_records: int,
    concurrency: int,
) -> AsyncGenerator[list[tuple[str, RecordColumns]], None]:
    """Every range's records, ranges interleaved: ``concurrency`` readers take the next range when done and
    hand runs over a bounded queue; whatever is ready comes out decoded together.
    """
    todo = iter(ranges)
    out: asyncio.Queue[object] = asyncio.Queue(maxsize=concurrency)

    async def reader() -> None:
        try:
            for rng in todo:  # shared: each range is taken by one reader
                await _read_one(cfg, rng, functools.partial(on_gap, rng[0]), run_records, out)
        except Exception as exc:  # noqa: BLE001 - the consumer raises it (a cancellation is not one)
            await out.put(exc)
            return
        await out.put(None)  # this reader has no range left

    tasks = [asyncio.create_task(reader()) for _ in range(min(concurrency, len(ranges)))]
    running = len(tasks)
    try:
        while running:
            # Whatever is ready goes in one hand-off: each costs the task's thread a wake-up.
            ready: list[tuple[str, Held]] = []
            item = await out.get()
            while True:
                if item is None:
                    running -= 1
                elif isinstance(item, Exception):
                    raise item
                else:
                    ready.append(item)  # type: ignore[arg-type]
                if out.empty():
                    break
                item = out.get_nowait()
            if ready:
                decoded = decode_held([held for _, held in ready])
                yield [(stream, columns) for (stream, _), columns in zip(ready, decoded, strict=True)]
    finally:
        await _stop(tasks, out)


async def _stop(tasks: list[asyncio.Task[None]], out: asyncio.Queue[object]) -> None:
    """End the readers. A cancelled reader may end with an error of its own (the SDK's transport cleaning up)
    and put it on the full queue, where it would wait for ever: empty the queue and cancel until all ended.
    """
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        while not out.empty():
            out.get_nowait()
        _, pending = await asyncio.wait(pending, timeout=0.05)


async def _next(batches: AsyncGenerator[_T, None]) -> _T:
    return await anext(batches)


async def _close(batches: AsyncGenerator[_T, None]) -> None:
    await batches.aclose()


def read_ranges_columns(
    cfg: S2Config,
    ranges: Sequence[Range],
    on_gap: Callable[[str, int, int], None],
    *,
    run_records: int = RUN_RECORDS,
    concurrency: int = RANGE_CONCURRENCY,
) -> Generator[tuple[str, RecordColumns], None, None]:
    """``(stream, columns)`` of every range's records, command records included, each range in seq_num order.

    ``on_gap(stream, lo, hi)`` is called for every run of seq_nums no longer stored; it may raise to stop the
    read. Synchronous for Spark's ``read()``: each step runs on the shared loop, so records flow to Spark
    while the sessions still read, and they are closed however the caller stops iterating.
    """
    batches = _ranges_columns(cfg, ranges, on_gap, run_records=run_records, concurrency=concurrency)
    try:
        while True:
            try:
                ready = _runtime.run(_next(batches))
            except StopAsyncIteration:
                return
            yield from ready
    finally:
        # A generator collected on the loop's own thread cannot wait on that loop; there the loop's
        # async-generator hook closes ``batches`` once it is collected too.
        if not _runtime.in_loop_thread():
            _runtime.run(_close(batches))


def read_range_columns(
    cfg: S2Config,
    stream: str,
    first: int,
    stop: int,
    on_gap: Callable[[int, int], None],
    *,
    run_records: int = RUN_RECORDS,
) -> Iterator[RecordColumns]:
    """`read_ranges_columns` of one range: its records in seq_num order."""
    with contextlib.closing(
        read_ranges_columns(
            cfg, [(stream, first, stop)], lambda _, lo, hi: on_gap(lo, hi), run_records=run_records
        )
    ) as batches:
        for _, columns in batches:
            yield columns
