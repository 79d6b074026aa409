"""Reads: unary reads (with long-polling) and read sessions, whose messages a ``ReadOut`` encodes."""

from __future__ import annotations

import asyncio
import random

from s2_sink.lite._append_input import ONE_MIB
from s2_sink.lite._errors import ApiError, not_found
from s2_sink.lite._read_out import ReadOut
from s2_sink.lite._read_params import ReadParams
from s2_sink.lite._request import Request
from s2_sink.lite._stats import RequestStats
from s2_sink.lite._stream import Stream
from s2_sink.lite._wire import read_batch

__all__ = ["read_session", "unary_read"]

_MAX_UNARY_WAIT = 60


async def _wait_change(stream: Stream, seconds: float | None) -> bool:
    """Wait until the stream's visible tail moves; False on timeout."""
    ev = stream.changed()
    try:
        async with asyncio.timeout(seconds):
            await ev.wait()
    except TimeoutError:
        return False
    return True


async def unary_read(stream: Stream, p: ReadParams, stats: RequestStats | None = None) -> bytes:
    """An encoded ReadBatch: at most 1000 records / 1 MiB; ``wait`` long-polls at the tail."""
    wait = min(p.wait or 0, _MAX_UNARY_WAIT)
    start = p.resolve_start(stream, can_follow=wait > 0)
    max_count = min(p.count or 1000, 1000)
    max_bytes = min(p.nbytes or ONE_MIB, ONE_MIB)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    while True:
        res = stream.collect(start, max_count, max_bytes, p.until)
        if res.count or res.until_reached:
            if stats is not None:
                stats.served(stream.name, res.count)
            tail = stream.tail() if res.next_seq >= stream.visible_seq else None
            return read_batch(res.encoded, tail)
        remaining = deadline - loop.time()
        if remaining <= 0 or stream.deleted:
            return read_batch(b"", None)
        await _wait_change(stream, remaining)


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
    if p.exhausted:
        req.start(200, out.headers, end=True)
        return
    wait: float | None = p.wait if p.wait is not None else (0 if p.bounded else None)
    can_follow = not p.bounded or bool(p.wait)
    try:
        seq = p.resolve_start(stream, can_follow)
    except ApiError as exc:
        req.respond(exc.status, [("content-type", "application/json")], exc.body())
        return
    req.start(200, out.headers)
    remaining_count = p.count
    remaining_bytes = p.nbytes
    total_count, total_bytes = delivered
    loop = asyncio.get_running_loop()
    following = False
    last_delivery = loop.time()
    while not req.closed:
        if stream.deleted:
            req.send(
                out.error(not_found("stream_not_found", f"stream {stream.name!r} was deleted")), end=True
            )
            return
        res = stream.collect(
            seq,
            min(remaining_count or 1000, 1000),
            min(remaining_bytes, ONE_MIB) if remaining_bytes is not None else ONE_MIB,
            p.until,
        )
        if res.count:
            caught_up = res.next_seq >= stream.visible_seq
            seq = res.next_seq
            if stats is not None:
                stats.served(stream.name, res.count)
            total_count += res.count
            total_bytes += res.nbytes
            tail = stream.tail() if caught_up else None
            req.send(out.batch(res.encoded, tail, (seq, total_count, total_bytes)))
            last_delivery = loop.time()
            if remaining_count is not None:
                remaining_count -= res.count
            if remaining_bytes is not None:
                remaining_bytes -= res.nbytes
            if remaining_count == 0 or remaining_bytes == 0 or res.until_reached:
                req.end()
                return
            await req.drain()
            if not caught_up:
                continue
            following = True
        elif res.until_reached:
            req.end()
            return
        # At the tail.
        if wait == 0:
            req.end()
            return
        if not following:
            following = True
            req.send(out.heartbeat(stream.tail()))
        heartbeat = random.uniform(5.0, 10.0)
        timeout = heartbeat
        if wait is not None:
            left = last_delivery + wait - loop.time()
            if left <= 0:
                req.end()
                return
            timeout = min(timeout, left)
        if not await _wait_change(stream, timeout):
            if wait is not None and loop.time() >= last_delivery + wait:
                req.end()
                return
            req.send(out.heartbeat(stream.tail()))
