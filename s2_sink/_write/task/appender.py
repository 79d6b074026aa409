"""One task's appends pipelined over its append sessions (the bytes leave in `_transport.append_session`), on
the process's background loop (`_transport.runtime`).

At most ``max_inflight_requests`` appends or ``max_inflight_bytes`` metered bytes are unacknowledged; acks are
collected oldest first, and a sent chunk is kept (for re-sending) only until acknowledged. A stream's appends
stay in one ordered session; its last chunk of the task, with nothing of it in flight, goes as one unary
append (`append_once`: a small stream costs no session; should more of it follow, that waits for the append to
land).

A failed session is dropped and the stream's unacknowledged chunks re-sent, in order, on a fresh one after a
wait (`_transport.retry`), until ``delivery_timeout_ms`` passes without an ack; errors retrying cannot fix
fail at once (`WriteError`, naming stream, batch, partition and option). A ``412 fencing_token_mismatch`` goes
to ``WritePlan.fence_keeper`` first (nothing refused by a 412 was applied). Appends of unknown outcome are
re-sent only where duplicates are allowed (``resend_ambiguous``); under exactly-once the task fails and its
retry reads back what landed (docs/architecture.md, "Retries").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from s2_sdk import AppendConditionError, Compression, FencingTokenMismatchError, S2ServerError

from s2_sink import _crashpoints
from s2_sink._transport.append_session import BulkAppendSession, append_once, basin_transport
from s2_sink._transport.explain import explain, is_s2_not_found, is_stream_deleting
from s2_sink._transport.retry import Patience, Retrying, no_side_effects, rate_limited, retryable
from s2_sink._transport.runtime import gather_bounded, get_pool
from s2_sink._transport.sdk import HttpClient
from s2_sink._write.task.results import StreamTotals
from s2_sink._write.task.tickets import (
    Chunk,
    cause,
    close_bulk,
    describe,
    forget_acked,
    is_acked,
    retrieve,
    settled,
)
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.errors import FencedError, WriteError

__all__ = ["Appender"]

log = logging.getLogger(__name__)

_MAX_TOKEN_CHANGES: Final = 16
_COMPRESSION: Final = {"none": Compression.NONE, "zstd": Compression.ZSTD, "gzip": Compression.GZIP}
_CLOSE_GRACE_S: Final = 10.0
_OPEN_SESSIONS: Final = 64
"""Append sessions one task keeps open at most (more while more streams have appends in flight): a task
routing to thousands of streams closes the least recently used idle one before opening another, so its
HTTP/2 streams stay few (h2 scans a connection's open streams to open one; S2 caps them per connection)."""
_KEEPERS: Final = 16
"""Fence keepers asked at once, at most (`Appender._keep_refused`)."""
_CLOSING_SESSIONS: Final = 16
"""Idle sessions closing at once, at most (a close waits for the server to end the session)."""


@dataclass(slots=True, eq=False)
class _StreamAppends:
    """The session and retry state of one stream's appends."""

    name: str
    token: str | None
    """The fencing token appends go out with."""
    totals: StreamTotals
    retrying: Retrying
    """The stream's retries since its last acknowledgement (its deadline)."""
    bulk: BulkAppendSession | None = None
    """The stream's open session."""
    unacked: deque[Chunk] = field(default_factory=deque)
    """Sent and not yet known to be acknowledged, oldest first (acks come in this order)."""
    token_changes: int = 0
    keeping: tuple[str, asyncio.Task[str]] | None = None
    """The token a 412 of this stream named and the fence keeper's answer, asked before the stream's
    recovery (`_keep_refused`)."""
    recreated: bool = False
    """The stream vanished under this task (404) and was created again (``create_streams``)."""


class Appender:
    """Sends one task's chunks and awaits their acknowledgements (use on the runtime loop)."""

    def __init__(self, plan: WritePlan, ctx: PartitionContext) -> None:
        self.plan = plan
        self.cfg = plan.cfg
        self.ctx = ctx
        self.streams: dict[str, _StreamAppends] = {}
        self.inflight: deque[Chunk] = deque()
        self.inflight_bytes = 0
        # The SDK's ack deadline is request_timeout_ms; this watchdog only catches a stuck session.
        self.ack_deadline_s = self.cfg.request_timeout_ms / 1000 * 2 + 1
        self.patience = Patience.of(self.cfg)
        self.pool = get_pool()
        self.recent: dict[str, None] = {}
        """Streams with an open session, least recently sent to first."""
        self.closing: list[asyncio.Task[None]] = []
        """Idle sessions closed to make room (`_make_room`), awaited by `release_all`."""
        self.keeping: list[asyncio.Task[str]] = []
        """The fence keepers asked (`_keep`), cancelled by `release_all` if still running."""
        self._basin_transport: HttpClient | None = None

    def totals(self, stream: str) -> StreamTotals | None:
        """What was appended to `stream` so far (``None``: nothing was ever sent to it)."""
        st = self.streams.get(stream)
        return st.totals if st is not None else None

    async def submit(self, chunk: Chunk) -> None:
        """Send `chunk` once the in-flight limits allow (awaiting the oldest acks until they do)."""
        cfg = self.cfg
        while self.inflight and (
            len(self.inflight) >= cfg.max_inflight_requests
            or self.inflight_bytes + chunk.nbytes > cfg.max_inflight_bytes
        ):
            await self._await_oldest()
        st = self._stream(chunk.stream)
        while st.bulk is None and st.unacked:  # more after a "last" unary append: nothing overtakes it
            await self._await_oldest()
        st.unacked.append(chunk)
        self.inflight.append(chunk)
        self.inflight_bytes += chunk.nbytes
        try:
            if chunk.last and st.bulk is None and len(st.unacked) == 1:
                self._send_once(st, chunk)
            else:
                if st.bulk is None:
                    await self._open(st)
                await self._send(st, chunk)
        except Exception as exc:
            await self._recover(st, exc)
        _crashpoints.hit("mid_session", **self.ctx.where(chunk.index))

    async def create_streams(self, streams: Iterable[str]) -> None:
        """With ``create_streams``, create those of `streams` this task has not appended to yet, if
        missing, concurrently (bounded: `SessionPool.ensure_streams`; each once per process), but not those
        the previous micro-batch appended to (``WritePlan.streams_found``). A stream created here has the
        empty token: the fence keeper is asked about it (`_KEEPERS` at once) before its first append."""
        keeper = self.plan.fence_keeper
        if self.cfg.create_streams:
            found = self.plan.streams_found
            new = [s for s in streams if s not in self.streams and s not in found]
            created = await self.pool.ensure_streams(self.cfg, new) if new else []
            tokens = await gather_bounded((keeper(s, "") for s in created), _KEEPERS) if keeper else []
            for st, token in zip(map(self._stream, created), tokens, strict=False):
                st.token, st.totals.token = token, None if token == st.token else token

    async def drain(self) -> None:
        """Await every acknowledgement."""
        while self.inflight:
            await self._await_oldest()

    async def release_all(self, healthy: bool) -> None:
        """Close the sessions; one with unacknowledged appends is dropped at once."""
        for task in self.keeping:
            task.cancel()  # asked ahead for a stream the failed task will not recover
        for st in self.streams.values():
            for chunk in st.unacked:
                if chunk.ticket is not None and not chunk.ticket.done():
                    chunk.ticket.cancel()  # a unary append still in flight (a session's is dropped below)
            await self._drop(st, healthy=healthy and not st.unacked)
        if self.closing:
            await asyncio.gather(*self.closing)

    def _stream(self, name: str) -> _StreamAppends:
        st = self.streams.get(name)
        if st is None:
            totals = StreamTotals(latency_sample=self.plan.latency_sample)
            token = self.plan.stream_tokens.get(name, self.plan.fencing_token)
            batch = self.plan.batch_id
            fields = {"stream": name, "batch": batch, "partition": self.ctx.partition_id}
            what = f"appending to stream {name!r} (batch {batch}, {self.ctx.describe()})"
            retrying = Retrying(self.patience, what, fields=fields)
            st = self.streams[name] = _StreamAppends(name, token, totals, retrying)
        return st

    async def _open(self, st: _StreamAppends) -> None:
        await self._make_room()
        st.bulk = BulkAppendSession(self._transport(), st.name, _COMPRESSION[self.cfg.compression])
        self.recent[st.name] = None

    async def _make_room(self) -> None:
        """At `_OPEN_SESSIONS` open sessions, close the least recently used one with nothing in flight
        (half-closed now, its end awaited later; at most `_CLOSING_SESSIONS` closing at once)."""
        if len(self.recent) < _OPEN_SESSIONS:
            return
        self.closing = [t for t in self.closing if not t.done()]
        if len(self.closing) >= _CLOSING_SESSIONS:
            await asyncio.wait(self.closing, return_when=asyncio.FIRST_COMPLETED)
        for name in self.recent:
            st = self.streams[name]
            if st.bulk is not None and not st.unacked:
                session, st.bulk = st.bulk, None
                del self.recent[name]
                self.closing.append(asyncio.create_task(close_bulk(session, grace_s=_CLOSE_GRACE_S)))
                return

    async def _send(self, st: _StreamAppends, chunk: Chunk) -> None:
        """Submit `chunk` on `st`'s open session and keep its ticket."""
        assert st.bulk is not None
        if not st.bulk.accepting:
            await self._reconnect(st)
        chunk.submitted_at = time.monotonic()
        # Already a future; the session marks a failed one's error retrieved itself.
        chunk.ticket = st.bulk.submit(chunk.message(st.token), chunk.count)
        if len(self.recent) > 1:  # the stream is now the most recently used
            self.recent.pop(st.name, None)
            self.recent[st.name] = None

    def _send_once(self, st: _StreamAppends, chunk: Chunk) -> None:
        """Send `chunk`, its stream's last and only unacknowledged one, as a unary append (no session:
        nothing can overtake it). A failure is recovered as a session's (`_recover` re-sends it on a
        session)."""
        chunk.submitted_at = time.monotonic()
        chunk.ticket = append_once(self._transport(), st.name, chunk.message(st.token), chunk.count)

    def _transport(self) -> HttpClient:
        """The basin's transport, looked up once per task (per append, the lookup's token hash was ~5% of
        a small stream's event-loop CPU)."""
        if self._basin_transport is None:
            self._basin_transport = basin_transport(self.pool.client(self.cfg), self.cfg.basin)
        return self._basin_transport

    async def _reconnect(self, st: _StreamAppends) -> None:
        """`st`'s bulk session takes no more appends. After the server's reconnect advice, wait for what
        it carries to be acknowledged (so the stream's appends stay in order), then open a fresh one; a
        failed session raises its own error (the caller recovers as from any session failure)."""
        session = st.bulk
        assert session is not None
        if session.error is not None:
            raise session.error
        sent = [c.ticket for c in st.unacked if c.ticket is not None]
        if sent:
            # asyncio.wait, not wait_for: the tickets stay uncancelled (their acks are still collected).
            _, late = await asyncio.wait(sent, timeout=self.ack_deadline_s)
            if late:
                raise TimeoutError(f"no acknowledgement within {self.ack_deadline_s:.1f}s")
            for ticket in sent:
                if not ticket.cancelled() and ticket.exception() is not None:
                    raise ticket.exception()  # type: ignore[misc]
        await self._drop(st, healthy=True)
        await self._open(st)

    async def _drop(self, st: _StreamAppends, *, healthy: bool) -> None:
        """Close `st`'s session (with a grace period for its acks when `healthy`)."""
        if st.bulk is not None:
            session, st.bulk = st.bulk, None
            self.recent.pop(st.name, None)
            await close_bulk(session, grace_s=_CLOSE_GRACE_S if healthy else 1.0)

    def _keeps(self, st: _StreamAppends, exc: BaseException) -> bool:
        """Whether `exc` is a 412 of `st`'s token the fence keeper is asked about."""
        return (
            isinstance(exc, FencingTokenMismatchError)
            and self.plan.fence_keeper is not None
            and st.token_changes < _MAX_TOKEN_CHANGES
        )

    def _keep(self, st: _StreamAppends, exc: FencingTokenMismatchError) -> asyncio.Task[str]:
        """The fence keeper's answer to `exc`, started now."""
        assert self.plan.fence_keeper is not None
        task = asyncio.ensure_future(self.plan.fence_keeper(st.name, exc.expected_fencing_token))
        task.add_done_callback(retrieve)
        self.keeping.append(task)
        return task

    def _keep_refused(self) -> None:
        """Ask the fence keeper about every in-flight stream whose append a 412 refused, at once: a task's
        first appends to streams fenced by nobody (or by another run) are all refused, and each answer
        takes a read and a fence; asked one stream after the other as their acks are collected, the first
        exactly-once batch over 1,000 streams took ~30 s. At most `_KEEPERS` run at once."""
        self.keeping = [t for t in self.keeping if not t.done()]
        for chunk in self.inflight:
            if len(self.keeping) >= _KEEPERS:
                return
            st = self.streams[chunk.stream]
            ticket = chunk.ticket
            if st.keeping is not None or ticket is None or not ticket.done() or ticket.cancelled():
                continue
            failure = ticket.exception()
            if failure is None or not isinstance(failure, Exception):
                continue
            exc = cause(failure)
            if self._keeps(st, exc) and st.unacked and st.unacked[0] is chunk:
                assert isinstance(exc, FencingTokenMismatchError)
                st.keeping = (exc.expected_fencing_token, self._keep(st, exc))

    async def _await_oldest(self) -> None:
        chunk = self.inflight[0]
        st = self.streams[chunk.stream]
        while True:
            ticket = chunk.ticket
            assert ticket is not None
            wait = chunk.submitted_at + self.ack_deadline_s - time.monotonic()
            if not await settled(ticket, max(wait, 0.001)):
                # The SDK bounds each attempt by request_timeout_ms; this watchdog covers a session
                # that stops making progress altogether (it is then dropped and its chunks re-sent).
                err = TimeoutError(f"no acknowledgement within {self.ack_deadline_s:.1f}s")
                await self._recover(st, err)
                continue
            try:
                ack = ticket.result()  # a cancelled ticket raises CancelledError, as awaiting it would
                break
            except Exception as exc:
                if self.plan.fence_keeper is not None and isinstance(cause(exc), FencingTokenMismatchError):
                    self._keep_refused()
                await self._recover(st, exc)
        self.inflight.popleft()
        self.inflight_bytes -= chunk.nbytes
        if st.unacked and st.unacked[0] is chunk:
            st.unacked.popleft()
            st.retrying.progress()  # a fresh deadline
        # Otherwise a recovery took this ack off `unacked` and counted it as progress already: collected
        # later, it must not reset the budget again (that doubled the retries of a stream never admitted).
        _crashpoints.hit("after_append_before_ack", **self.ctx.where(chunk.index))
        latency_ms = (time.monotonic() - chunk.submitted_at) * 1000
        st.totals.acked(chunk.count, chunk.nbytes, ack, latency_ms)

    async def _recover(self, st: _StreamAppends, exc: Exception) -> None:
        """Reopen `st`'s session and re-send its unacknowledged chunks, or raise when it cannot."""
        exc = cause(exc)
        while True:
            await self._drop(st, healthy=False)
            if self._keeps(st, exc):
                # Nothing refused by a 412 was applied: switch tokens and re-send without backoff.
                assert isinstance(exc, FencingTokenMismatchError)
                keeping, st.keeping = st.keeping, None
                if keeping is None or keeping[0] != exc.expected_fencing_token:
                    keeping = (exc.expected_fencing_token, self._keep(st, exc))
                st.token = st.totals.token = await keeping[1]
                st.token_changes += 1
                try:
                    await self._resend(st)
                    return
                except Exception as again:
                    exc = again
                    continue
            if self._vanished(st, exc):
                # A 404 (or a 409 of a deletion still pending) applied nothing: create the stream again and
                # re-send (under exactly-once the new stream's empty token refuses it, and the fence keeper
                # checks for a reset stream).
                try:
                    await self.pool.ensure_stream(self.cfg, st.name)
                    await self._resend(st)
                    return
                except Exception as again:
                    exc = again
                    continue
            self._check_retryable(st, exc)
            retrying = st.retrying
            if forget_acked(st.unacked):
                retrying.progress()  # acks arrived on the failed session: progress, a fresh deadline
            if st.unacked and not self.plan.resend_ambiguous and not no_side_effects(exc):
                # The task's retry reads back what landed; its own calls wait for S2 if it is still down.
                why = "possibly applied appends are not re-sent in this delivery mode"
                raise self._error(st, exc, f"{why}: the task's retry reads back what landed") from exc
            delay = retrying.wait(exc)
            if delay is None:
                why = explain(retrying.give_up(exc), self.cfg, stream=st.name).message
                if rate_limited(exc):
                    why += (
                        "; the stream stayed over S2's append rate limit: send fewer, larger appends "
                        "(sink.batch.max-size)"
                    )
                raise self._error(st, exc, f"after {retrying.failures} session retries: {why}") from exc
            st.totals.retries += 1
            await asyncio.sleep(delay)
            try:
                await self._resend(st)
                return
            except Exception as again:
                exc = again

    async def _resend(self, st: _StreamAppends) -> None:
        """Open a fresh session for `st` and re-send, in order, its chunks not yet acknowledged (its last
        and only one as a unary append again)."""
        if len(st.unacked) == 1 and st.unacked[0].last and not is_acked(st.unacked[0]):
            chunk = st.unacked[0]
            if chunk.ticket is not None:
                chunk.ticket.cancel()
            self._send_once(st, chunk)
            return
        await self._open(st)
        for chunk in st.unacked:
            if is_acked(chunk):
                continue  # acknowledged before the session failed; _await_oldest collects it
            if chunk.ticket is not None:
                chunk.ticket.cancel()  # the dropped session's ticket will never resolve now
            await self._send(st, chunk)

    def _vanished(self, st: _StreamAppends, exc: Exception) -> bool:
        """Whether `st`'s stream, which this process created or found or the previous micro-batch wrote, is
        gone (deleted since: S2's ``delete_on_empty``, or an operator) and is to be created again, once per
        task. S2 answers a
        deleted stream's appends 409 ``stream_deletion_pending`` until the deletion completes, then 404;
        creating it again waits for that (`create_if_missing`). An open session's next append gets 503
        ``unavailable`` instead: retried as any 503, its next attempt meets the 409 or the 404."""
        gone = is_s2_not_found(exc) and isinstance(exc, S2ServerError) and exc.code == "stream_not_found"
        if not ((gone or is_stream_deleting(exc)) and self.cfg.create_streams) or st.recreated:
            return False
        st.recreated = True
        self.pool.forget_stream(self.cfg, st.name)
        return True

    def _check_retryable(self, st: _StreamAppends, exc: Exception) -> None:
        if isinstance(exc, FencingTokenMismatchError):
            raise FencedError(
                f"stream {st.name!r} is fenced by another writer (token {exc.expected_fencing_token!r}); "
                f"batch {self.plan.batch_id}, {self.ctx.describe()}"
            ) from exc
        if isinstance(exc, AppendConditionError):
            raise self._error(st, exc, "append condition failed") from exc
        if isinstance(exc, S2ServerError):
            status = exc.status_code
            if status in (401, 403, 404) or is_stream_deleting(exc):
                raise self._error(st, exc, explain(exc, self.cfg, stream=st.name).message) from exc
            if not retryable(exc):
                raise self._error(st, exc, "request rejected") from exc
        elif not retryable(exc):
            raise self._error(st, exc, "unexpected error") from exc

    def _error(self, st: _StreamAppends, exc: BaseException, why: str) -> WriteError:
        return WriteError(
            f"append to stream {st.name!r} in basin {self.cfg.basin!r} failed: {why} "
            f"(batch {self.plan.batch_id}, {self.ctx.describe()}, "
            f"attempt {self.ctx.attempt_number}): {describe(exc)}"
        )
