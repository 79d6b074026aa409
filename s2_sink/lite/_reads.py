"""Reads: unary reads (with long-polling) and read sessions, whose messages a ``ReadOut`` encodes.

As S2's ``read_session`` (``lite/src/backend/read.rs``): a read first catches up on stored records (batches
without a ``tail``), then, if it may follow, sends a heartbeat (an empty batch with the tail) and follows
new records as they are appended (batches with the ``tail`` after them), until a bound is met or ``wait``
seconds pass without a record. Records below the trim point are skipped, not refused. A stream deleted
under a session ends it with 503 ``unavailable`` (S2's streamer is gone), after any records it still had,
its terminal ``trim`` record included; a unary read gathers as ``merge_read_session`` does.
"""

from __future__ import annotations

import asyncio
import random

from s2_sink.lite._api_errors import ApiError
from s2_sink.lite._append_input import MAX_BATCH_RECORDS, ONE_MIB
from s2_sink.lite._read_out import ReadOut
from s2_sink.lite._read_params import ReadParams
from s2_sink.lite._request import Request
from s2_sink.lite._stats import RequestStats
from s2_sink.lite._stream import ReadResult, Stream
from s2_sink.lite._wire import read_batch

__all__ = ["read_session", "unary_read"]

_MAX_UNARY_WAIT = 60
#: Heartbeats while following, every 5-15 s (S2's ``new_heartbeat_sleep``).
_HEARTBEAT_S = (5.0, 15.0)


def _gone() -> ApiError:
    """How a read of a stream deleted under it ends: S2's streamer is gone (``StreamerMissingInAction``)."""
    return ApiError(503, "unavailable", "streamer missing in action")


async def _wait_change(stream: Stream, seconds: float | None) -> bool:
    """Wait until the stream's visible tail moves (or it is deleted); False on timeout."""
    ev = stream.changed()
    try:
        async with asyncio.timeout(seconds):
            await ev.wait()
    except TimeoutError:
        return False
    return True


def _collect(
    stream: Stream, seq: int, count: int | None, nbytes: int | None, until: int | None
) -> ReadResult:
    return stream.collect(
        seq,
        min(count if count is not None else MAX_BATCH_RECORDS, MAX_BATCH_RECORDS),
        min(nbytes, ONE_MIB) if nbytes is not None else ONE_MIB,
        until,
    )


async def unary_read(stream: Stream, p: ReadParams, stats: RequestStats | None = None) -> bytes:
    """An encoded ReadBatch: at most 1000 records / 1 MiB; ``wait`` (at most 60 s) long-polls at the tail."""
    wait = min(p.wait or 0, _MAX_UNARY_WAIT)
    start = p.resolve_start(stream, can_follow=wait > 0)
    if p.zero:
        return read_batch(b"", None)
    res = _collect(stream, start, p.count, p.nbytes, p.until)
    if res.count or res.until_reached or wait == 0 or res.next_seq < stream.visible_seq:
        if stats is not None:
            stats.served(stream.name, res.count)
        return read_batch(res.encoded, None)
    # At the tail (or past every record left): wait for the next records, then answer with them.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    seq = res.next_seq
    while (remaining := deadline - loop.time()) > 0:
        await _wait_change(stream, remaining)
        res = _collect(stream, seq, p.count, p.nbytes, p.until)
        if res.count:
            if stats is not None:
                stats.served(stream.name, res.count)
            return read_batch(res.encoded, stream.tail())
        if stream.deleted:
            raise _gone()
        if res.until_reached:
            break
    return read_batch(b"", None)


async def read_session(
    req: Request,
    stream: Stream,
    p: ReadParams,
    out: ReadOut,
    delivered: tuple[int, int] = (0, 0),
    *,
    stats: RequestStats | None = None,
) -> None:
    """Stream batches until a bound is met, ``wait`` expires, or the client goes away.

    ``delivered`` is (records, metered bytes) sent before a resumed session started (SSE ``last-event-id``).
    """
    can_follow = p.may_follow()
    try:
        seq = p.resolve_start(stream, can_follow)
    except ApiError as exc:
        req.respond(exc.status, [("content-type", "application/json")], exc.body())
        return
    req.start(200, out.headers)
    if p.zero:
        _finish(req, out)
        return
    remaining_count = p.count
    remaining_bytes = p.nbytes
    total_count, total_bytes = delivered
    loop = asyncio.get_running_loop()
    following = False
    last_delivery = loop.time()
    while not req.closed:
        res = _collect(stream, seq, remaining_count, remaining_bytes, p.until)
        if res.count:
            seq = res.next_seq
            if stats is not None:
                stats.served(stream.name, res.count)
            total_count += res.count
            total_bytes += res.nbytes
            # Only records that arrive while the session follows carry the tail after them.
            tail = stream.tail() if following else None
            req.send(out.batch(res.encoded, tail, (seq - 1, total_count, total_bytes)))
            last_delivery = loop.time()
            if remaining_count is not None:
                remaining_count -= res.count
            if remaining_bytes is not None:
                remaining_bytes -= res.nbytes
            if remaining_count == 0 or remaining_bytes == 0 or res.until_reached:
                break
            await req.drain()
            continue
        if res.until_reached or res.next_seq < stream.visible_seq:
            break  # the until bound, or the next record is larger than the bytes still allowed
        seq = max(seq, res.next_seq)
        # Past every record there is.
        if stream.deleted:
            req.send(out.error(_gone()), end=True)
            return
        if not can_follow:
            break
        left = None if p.wait is None else last_delivery + p.wait - loop.time()
        if left is not None and left <= 0:
            break
        if not following:
            following = True
            req.send(out.heartbeat(stream.tail()))
        timeout = random.uniform(*_HEARTBEAT_S)
        if left is not None:
            timeout = min(timeout, left)
        if not await _wait_change(stream, timeout) and not stream.deleted:
            if p.wait is not None and loop.time() >= last_delivery + p.wait:
                break
            req.send(out.heartbeat(stream.tail()))
    if not req.closed:
        _finish(req, out)


def _finish(req: Request, out: ReadOut) -> None:
    """End a session that met its bounds (SSE: after a ``done`` event)."""
    last = out.done()
    if last:
        req.send(last, end=True)
    else:
        req.end()
