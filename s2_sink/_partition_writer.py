"""Where record frames meet the network: one Spark task's records appended to S2.

`write_partition(plan, batches)` consumes an iterator of Arrow record batches in the RECORD FRAME
layout (``_s2_body``, ``_s2_headers``, ``_s2_timestamp``, ``_s2_key``, ``_s2_error``, and optionally a
string column naming each row's target stream), turns columns into SDK ``Record`` objects without
building per-row dicts, cuts them into appends, pipelines the appends over pooled sessions and returns
small per-stream result rows (`RESULT_SCHEMA`).

Chunking is deterministic: for each target stream, records are taken in row order and cut greedily at
``batch_max_records`` records or ``flush_buffer_bytes`` metered bytes (less ``WritePlan.chunk_tag_reserve``)
— whichever comes first — independent of how Spark splits the partition into Arrow batches. With many
routed streams, when more than ``max_buffered_requests`` partial chunks are open, the fullest is sent
early; that decision also depends only on the row order. The same rows in the same order therefore
always produce the same chunks, which exactly-once delivery relies on.

Memory stays bounded: the partition is streamed one Arrow batch at a time; at most
``max_buffered_requests`` partial chunks are held; sent chunks are kept (for re-sending) only until
acknowledged, and a task never has more than ``max_inflight_requests`` appends or
``max_inflight_bytes`` metered bytes unacknowledged.

Retries: append sessions are opened without SDK retries (see `_session_pool` for why); when a
session fails, this module drops it, waits (exponential backoff with full jitter, from the ``backoff``
package) and re-sends the stream's unacknowledged chunks, in order, on a fresh session — at most
``max_retries + session_retries`` times without progress. Then the task fails with a `WriteError`
naming the stream, batch, partition and cause. Errors that retrying cannot fix (auth, missing
stream, fencing, append conditions) fail at once.

Seams for exactly-once delivery (all ``None``/neutral in at-least-once mode), on `WritePlan`:
``fencing_token`` (sent with every append) and ``fence_keeper`` (on a 412), ``chunk_tagger`` +
``chunk_tag_reserve`` (a header on the first record of each append), ``recovery`` (per-task hook
returning a filter that drops records an earlier attempt already wrote) and ``resend_ambiguous``
(whether possibly-applied chunks may be sent again by the session-level retry).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from s2_sdk import (
    AppendAck,
    AppendConditionError,
    AppendInput,
    FencingTokenMismatchError,
    Record,
    S2ServerError,
)

from s2_sink import _runtime
from s2_sink._exactly_once import _crashpoints
from s2_sink._retry import Backoff, no_side_effects, retryable
from s2_sink._session_pool import PooledSession, get_pool
from s2_sink.config import ONE_MIB, S2Config
from s2_sink.encoders._frame import BODY, ERROR, HEADERS, TIMESTAMP
from s2_sink.encoders._metered import header_size, metered_bytes, metered_size
from s2_sink.errors import EncodeError, FencedError, WriteError

__all__ = [
    "RESULT_DDL",
    "RESULT_SCHEMA",
    "ChunkInfo",
    "ChunkTagger",
    "FenceKeeper",
    "PartitionContext",
    "RecordFilter",
    "RecoveryHook",
    "WritePlan",
    "write_partition",
]

log = logging.getLogger(__name__)

OnError = Literal["fail", "skip", "dlq"]

# Headers of a dead-letter record (the body is the original payload).
DLQ_ERROR: Final = b"s2sink-error"
DLQ_BATCH: Final = b"s2sink-batch-id"
DLQ_PARTITION: Final = b"s2sink-partition"
DLQ_TARGET: Final = b"s2sink-target-stream"
DLQ_TRUNCATED: Final = b"s2sink-truncated"

_MAX_TOKEN_CHANGES: Final = 16


@dataclass(frozen=True, slots=True)
class PartitionContext:
    """Identity of the Spark task writing one partition of one micro-batch."""

    batch_id: int
    partition_id: int
    attempt_number: int
    task_attempt_id: int
    stage_id: int


@dataclass(frozen=True, slots=True)
class ChunkInfo:
    """One append about to be sent: its stream, its 0-based index among this task's appends to that
    stream (deterministic, see the module docstring), and its size after any recovery filtering."""

    stream: str
    index: int
    record_count: int
    metered_bytes: int


class ChunkTagger(Protocol):
    """Returns the header appended (as the last header) to the first record of each append. Must
    pickle (it ships in the plan); its metered size (2 + len(name) + len(value)) must not exceed
    ``WritePlan.chunk_tag_reserve``."""

    def __call__(self, ctx: PartitionContext, chunk: ChunkInfo) -> tuple[bytes, bytes]: ...


class RecordFilter(Protocol):
    """Given one chunk's records (before tagging), returns the ones to append (e.g. minus those an
    earlier task attempt already wrote). Called on the task thread; returning ``[]`` skips the append."""

    def __call__(self, stream: str, records: list[Record]) -> list[Record]: ...


class FenceKeeper(Protocol):
    """Called on the event loop when an append is refused with ``412 fencing_token_mismatch``: given
    the stream and its current token, returns the token to append with from now on (the refused
    appends and everything after them are then re-sent on a fresh session: a 412 means none of them
    was applied), or raises `FencedError` when this writer must stop."""

    async def __call__(self, stream: str, current: str) -> str: ...


class RecoveryHook(Protocol):
    """Called once per task, on the task thread, before the first record is read. Returns a
    `RecordFilter`, or ``None`` when there is nothing to recover. May block on S2 reads (use
    ``s2_sink._runtime.run`` and ``s2_sink._session_pool.get_pool().client(cfg)``)."""

    def __call__(self, plan: WritePlan, ctx: PartitionContext) -> RecordFilter | None: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class WritePlan:
    """Everything an executor task needs to write its partition: plain, picklable values."""

    cfg: S2Config
    """Connection, batching and retry settings."""

    batch_id: int
    """The micro-batch being written (for errors, dead letters and result rows)."""

    stream: str | None = None
    """The target stream when rows are not routed (``stream_column`` is ``None``)."""

    stream_column: str | None = None
    """A string column of the frame holding each row's target stream; a null value is a bad row."""

    on_error: OnError = "fail"
    """What to do with a bad row (``_s2_error`` set, null stream, record over 1 MiB): raise an
    `EncodeError`, count and skip it, or append it to ``dlq_stream``."""

    dlq_stream: str | None = None
    """Dead-letter stream for ``on_error="dlq"``."""

    payload_column: str | None = None
    """Optional binary column with each bad row's original payload (the DLQ record body); when absent,
    the row's ``_s2_body`` (or an empty body) is used."""

    fencing_token: str | None = None
    """Sent with every append (exactly-once fencing); ``None`` = no fencing."""

    fence_keeper: FenceKeeper | None = None
    """What to do when ``fencing_token`` is refused; ``None`` = fail with `FencedError`."""

    chunk_tagger: ChunkTagger | None = None
    """Tags the first record of each append (exactly-once chunk tags); ``None`` = no tag."""

    chunk_tag_reserve: int = 0
    """Metered bytes kept free in every append for the tag header."""

    recovery: RecoveryHook | None = None
    """Per-task recovery hook (exactly-once task retries and replays); ``None`` = none."""

    resend_ambiguous: bool = True
    """Whether the session-level retry may re-send chunks that might already be applied (duplicates
    possible). Exactly-once sets ``False``: such failures then fail the task, and the task retry's
    recovery hook sorts out what was written."""

    latency_sample: int = 256
    """Ack latencies kept per stream and task (reservoir sample) for the p50/p99 metrics."""


RESULT_SCHEMA: Final = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("stream", pa.string()),
        pa.field("rows_in", pa.int64(), nullable=False),
        pa.field("records", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("appends", pa.int64(), nullable=False),
        pa.field("retries", pa.int64(), nullable=False),
        pa.field("skipped", pa.int64(), nullable=False),
        pa.field("dead_lettered", pa.int64(), nullable=False),
        pa.field("first_seq", pa.int64()),
        pa.field("end_seq", pa.int64()),
        pa.field("latencies_ms", pa.list_(pa.float64())),
        pa.field("duration_ms", pa.float64(), nullable=False),
    ]
)
"""One row per (task, stream) written, plus one row with ``stream = null`` carrying the task's totals
of rows in, skipped and dead-lettered rows and its duration. ``first_seq``/``end_seq`` are the first
and one-past-last sequence numbers this task's acks reported on that stream."""

RESULT_DDL: Final = (
    "partition int, attempt int, stream string, rows_in bigint, records bigint, bytes bigint, "
    "appends bigint, retries bigint, skipped bigint, dead_lettered bigint, first_seq bigint, "
    "end_seq bigint, latencies_ms array<double>, duration_ms double"
)


# ---------------------------------------------------------------------------------------------------
# Pipeline state


@dataclass(slots=True, eq=False)
class _Chunk:
    stream: str
    index: int
    records: list[Record]
    nbytes: int
    ticket: asyncio.Future[AppendAck] | None = None
    submitted_at: float = 0.0


@dataclass(slots=True, eq=False)
class _StreamState:
    name: str
    buffer: list[Record] = field(default_factory=list)
    buf_bytes: int = 0
    chunks: int = 0
    session: PooledSession | None = None
    unacked: deque[_Chunk] = field(default_factory=deque)
    failures: int = 0
    waits: Iterator[float] | None = None
    token: str | None = None
    token_changes: int = 0
    records: int = 0
    bytes: int = 0
    appends: int = 0
    retries: int = 0
    first_seq: int | None = None
    end_seq: int | None = None
    latencies: list[float] = field(default_factory=list)
    seen_acks: int = 0


class _PartitionWriter:
    def __init__(self, plan: WritePlan, ctx: PartitionContext) -> None:
        cfg = plan.cfg
        self.plan = plan
        self.cfg = cfg
        self.ctx = ctx
        self.max_records = cfg.batch_max_records
        self.max_bytes = cfg.flush_buffer_bytes - plan.chunk_tag_reserve
        self.max_record = ONE_MIB - plan.chunk_tag_reserve
        if self.max_bytes < 8:
            raise WriteError(
                f"flush_buffer_bytes ({cfg.flush_buffer_bytes}) leaves no room after the "
                f"{plan.chunk_tag_reserve}-byte chunk tag"
            )
        self.streams: dict[str, _StreamState] = {}
        self.open_buffers: set[str] = set()
        self.inflight: deque[_Chunk] = deque()
        self.inflight_bytes = 0
        self.rows_in = 0
        self.skipped = 0
        self.dead_lettered = 0
        self.filter: RecordFilter | None = None
        # The SDK's ack deadline is request_timeout_ms; this watchdog only catches a stuck session.
        self.ack_deadline_s = cfg.request_timeout_ms / 1000 * 2 + 1
        self.backoff = Backoff.for_sessions(cfg)
        self.rng = random.Random()
        self.pool = get_pool()

    # -- rows -> records -------------------------------------------------------------------------------

    def consume(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        first_row = self.rows_in
        self.rows_in += n
        names = batch.schema.names
        body_col = batch.column(BODY)
        bodies: list[bytes | None] = body_col.to_pylist()
        header_col = batch.column(HEADERS) if HEADERS in names else None
        headers = _headers(header_col) if header_col is not None else None
        # A null body is a bad row: its size is never used.
        sizes: list[int] = pc.fill_null(metered_bytes(body_col, header_col), 0).to_pylist()
        stamps: list[int | None] | None = None
        if TIMESTAMP in names and batch.column(TIMESTAMP).null_count < n:
            stamps = batch.column(TIMESTAMP).to_pylist()
        errors: list[str | None] | None = None
        if ERROR in names and batch.column(ERROR).null_count < n:
            errors = batch.column(ERROR).to_pylist()
        targets: list[str | None] | None = None
        if self.plan.stream_column is not None:
            targets = batch.column(self.plan.stream_column).to_pylist()

        hdrs: Iterable[list[tuple[bytes, bytes]] | None] = (
            headers if headers is not None else itertools.repeat(None, n)
        )
        tss: Iterable[int | None] = stamps if stamps is not None else itertools.repeat(None, n)
        records = [
            Record(b, h or [], t) if b is not None else None
            for b, h, t in zip(bodies, hdrs, tss, strict=False)
        ]

        if (
            errors is None
            and targets is None
            and self.plan.stream is not None
            and all(s <= self.max_record for s in sizes)
            and None not in bodies
        ):
            self._add_run(self.plan.stream, records, sizes)  # type: ignore[arg-type]
            return

        fixed = self.plan.stream
        for i in range(n):
            rec = records[i]
            err = errors[i] if errors is not None else None
            target = targets[i] if targets is not None else fixed
            if err is None:
                if target is None:
                    err = f"target stream column {self.plan.stream_column!r} is null"
                elif rec is None:
                    err = f"{BODY} is null"
                elif sizes[i] > self.max_record:
                    err = f"record of {sizes[i]} metered bytes exceeds the {self.max_record}-byte limit"
            if err is not None:
                self._bad_row(batch, i, first_row + i, err, target)
                continue
            assert rec is not None
            assert target is not None
            self._add_one(target, rec, sizes[i])

    def _add_run(self, stream: str, records: list[Record], sizes: list[int]) -> None:
        """Greedy chunking of a run of records for one stream (the single-stream fast path)."""
        st = self._state(stream)
        start = 0
        n = len(records)
        count = len(st.buffer)
        nbytes = st.buf_bytes
        for i in range(n):
            size = sizes[i]
            if count and (count >= self.max_records or nbytes + size > self.max_bytes):
                st.buffer.extend(records[start:i])
                st.buf_bytes = nbytes
                start = i
                self._flush(st)
                count, nbytes = 0, 0
            count += 1
            nbytes += size
        st.buffer.extend(records[start:])
        st.buf_bytes = nbytes
        if st.buffer:
            self.open_buffers.add(stream)
        if count >= self.max_records:
            self._flush(st)

    def _add_one(self, stream: str, rec: Record, size: int) -> None:
        st = self._state(stream)
        if st.buffer and (len(st.buffer) >= self.max_records or st.buf_bytes + size > self.max_bytes):
            self._flush(st)
        if not st.buffer:
            self.open_buffers.add(stream)
            if len(self.open_buffers) > self.cfg.max_buffered_requests:
                fullest = max(
                    (self.streams[s] for s in self.open_buffers if s != stream),
                    key=lambda s: (s.buf_bytes, s.name),
                )
                self._flush(fullest)
        st.buffer.append(rec)
        st.buf_bytes += size
        if len(st.buffer) >= self.max_records:
            self._flush(st)

    def _bad_row(self, batch: pa.RecordBatch, i: int, row: int, err: str, target: str | None) -> None:
        where = f"row {row} of partition {self.ctx.partition_id} in batch {self.plan.batch_id}"
        mode = self.plan.on_error
        if mode == "fail":
            raise EncodeError(f"{where}: {err} (set on_error='skip' or 'dlq' to keep going)")
        if mode == "skip":
            self.skipped += 1
            if self.skipped <= 3:
                log.warning("skipping bad row: %s: %s", where, err)
            return
        assert self.plan.dlq_stream is not None
        payload: bytes | None = None
        if self.plan.payload_column is not None:
            payload = batch.column(self.plan.payload_column)[i].as_py()
        if payload is None:
            payload = batch.column(BODY)[i].as_py() or b""
        headers = [
            (DLQ_ERROR, err.encode()[:4096]),
            (DLQ_BATCH, str(self.plan.batch_id).encode()),
            (DLQ_PARTITION, str(self.ctx.partition_id).encode()),
            (DLQ_TARGET, (target or "").encode()),
        ]
        room = self.max_record - metered_size(b"", headers) - header_size(DLQ_TRUNCATED, b"true")
        if len(payload) > room:
            payload = payload[:room]
            headers.append((DLQ_TRUNCATED, b"true"))
        self.dead_lettered += 1
        self._add_one(self.plan.dlq_stream, Record(payload, headers), metered_size(payload, headers))

    def _state(self, stream: str) -> _StreamState:
        st = self.streams.get(stream)
        if st is None:
            st = self.streams[stream] = _StreamState(stream, token=self.plan.fencing_token)
        return st

    # -- chunks -> appends -----------------------------------------------------------------------------

    def _flush(self, st: _StreamState) -> None:
        records, nbytes = st.buffer, st.buf_bytes
        st.buffer, st.buf_bytes = [], 0
        self.open_buffers.discard(st.name)
        if not records:
            return
        index = st.chunks
        st.chunks += 1
        if self.filter is not None:
            kept = self.filter(st.name, records)
            if len(kept) != len(records):
                nbytes = sum(metered_size(r.body, r.headers) for r in kept)
            records = kept
            if not records:
                return
        if self.plan.chunk_tagger is not None:
            name, value = self.plan.chunk_tagger(self.ctx, ChunkInfo(st.name, index, len(records), nbytes))
            tag_size = header_size(name, value)
            if tag_size > self.plan.chunk_tag_reserve:
                raise WriteError(
                    f"chunk tag of {tag_size} bytes exceeds its {self.plan.chunk_tag_reserve}-byte reserve"
                )
            first = records[0]  # the tag goes last: positional readers of @key/@action stay undisturbed
            records = [Record(first.body, [*first.headers, (name, value)], first.timestamp), *records[1:]]
            nbytes += tag_size
        # Fault-suite crash points (inert unless S2SINK_CRASH_PLAN is set): tests/faults.
        _crashpoints.hit("before_append", **self._where(index))
        _runtime.run(self._submit(_Chunk(st.name, index, records, nbytes)))

    async def _submit(self, chunk: _Chunk) -> None:
        cfg = self.cfg
        while self.inflight and (
            len(self.inflight) >= cfg.max_inflight_requests
            or self.inflight_bytes + chunk.nbytes > cfg.max_inflight_bytes
        ):
            await self._await_oldest()
        st = self.streams[chunk.stream]
        st.unacked.append(chunk)
        self.inflight.append(chunk)
        self.inflight_bytes += chunk.nbytes
        try:
            if st.session is None:
                await self._open(st)
            assert st.session is not None
            chunk.submitted_at = time.monotonic()
            chunk.ticket = _future(await st.session.session.submit(self._input(chunk)))
        except Exception as exc:
            await self._recover(st, exc)
        _crashpoints.hit("mid_session", **self._where(chunk.index))

    def _where(self, chunk: int) -> dict[str, int]:
        ctx = self.ctx
        return {
            "batch": ctx.batch_id,
            "partition": ctx.partition_id,
            "attempt": ctx.attempt_number,
            "chunk": chunk,
        }

    def _input(self, chunk: _Chunk) -> AppendInput:
        return AppendInput(records=chunk.records, fencing_token=self.streams[chunk.stream].token)

    async def _open(self, st: _StreamState) -> None:
        if self.cfg.create_streams:
            await self.pool.ensure_stream(self.cfg, st.name)
        st.session = await self.pool.acquire(self.cfg, st.name)

    async def _await_oldest(self) -> None:
        chunk = self.inflight[0]
        st = self.streams[chunk.stream]
        while True:
            assert chunk.ticket is not None
            wait = chunk.submitted_at + self.ack_deadline_s - time.monotonic()
            try:
                ack = await asyncio.wait_for(asyncio.shield(chunk.ticket), timeout=max(wait, 0.001))
                break
            except TimeoutError:
                # The SDK bounds each attempt by request_timeout_ms; this watchdog covers a session
                # that stops making progress altogether (it is then dropped and its chunks re-sent).
                err = TimeoutError(f"no acknowledgement within {self.ack_deadline_s:.1f}s")
                await self._recover(st, err)
            except Exception as exc:
                await self._recover(st, exc)
        self.inflight.popleft()
        self.inflight_bytes -= chunk.nbytes
        if st.unacked and st.unacked[0] is chunk:
            st.unacked.popleft()
        st.failures = 0
        st.waits = None
        _crashpoints.hit("after_append_before_ack", **self._where(chunk.index))
        self._record_ack(st, chunk, ack)

    def _record_ack(self, st: _StreamState, chunk: _Chunk, ack: AppendAck) -> None:
        st.records += len(chunk.records)
        st.bytes += chunk.nbytes
        st.appends += 1
        if st.first_seq is None:
            st.first_seq = ack.start.seq_num
        st.end_seq = ack.end.seq_num
        latency = (time.monotonic() - chunk.submitted_at) * 1000
        st.seen_acks += 1
        cap = self.plan.latency_sample
        if len(st.latencies) < cap:
            st.latencies.append(latency)
        else:
            j = self.rng.randrange(st.seen_acks)
            if j < cap:
                st.latencies[j] = latency

    async def _recover(self, st: _StreamState, exc: Exception) -> None:
        """Reopen `st`'s session and re-send its unacknowledged chunks, or raise when it cannot."""
        while True:
            if st.session is not None:
                await self.pool.release(st.session, healthy=False)
                st.session = None
            if (
                isinstance(exc, FencingTokenMismatchError)
                and self.plan.fence_keeper is not None
                and st.token_changes < _MAX_TOKEN_CHANGES
            ):
                # Nothing refused by a 412 was applied: switch tokens and re-send without backoff.
                st.token = await self.plan.fence_keeper(st.name, exc.expected_fencing_token)
                st.token_changes += 1
                try:
                    await self._resend(st)
                    return
                except Exception as again:
                    exc = again
                    continue
            self._check_retryable(st, exc)
            if st.waits is None:
                st.waits = self.backoff.delays()
            delay = next(st.waits, None)
            if delay is None:
                raise self._error(st, exc, f"after {self.backoff.retries} session retries") from exc
            st.failures += 1
            st.retries += 1
            log.warning(
                "append session failed, retrying stream=%s batch=%s partition=%s retry=%s delay=%.3fs: %s",
                st.name,
                self.plan.batch_id,
                self.ctx.partition_id,
                st.failures,
                delay,
                _describe(exc),
            )
            await asyncio.sleep(delay)
            try:
                await self._resend(st)
                return
            except Exception as again:
                exc = again

    async def _resend(self, st: _StreamState) -> None:
        """Open a fresh session for `st` and re-send, in order, its chunks not yet acknowledged."""
        await self._open(st)
        assert st.session is not None
        for chunk in st.unacked:
            if _acked(chunk):
                continue  # acknowledged before the session failed; _await_oldest collects it
            if chunk.ticket is not None:
                chunk.ticket.cancel()  # the dropped session's ticket will never resolve now
            chunk.submitted_at = time.monotonic()
            chunk.ticket = _future(await st.session.session.submit(self._input(chunk)))

    def _check_retryable(self, st: _StreamState, exc: Exception) -> None:
        if isinstance(exc, FencingTokenMismatchError):
            raise FencedError(
                f"stream {st.name!r} is fenced by another writer (token {exc.expected_fencing_token!r}); "
                f"batch {self.plan.batch_id}, partition {self.ctx.partition_id}"
            ) from exc
        if isinstance(exc, AppendConditionError):
            raise self._error(st, exc, "append condition failed") from exc
        if isinstance(exc, S2ServerError):
            status = exc.status_code
            if status in (401, 403):
                raise self._error(
                    st, exc, "not authorized: check access_token (s2.auth-token) and its permissions"
                ) from exc
            if status == 404:
                hint = "" if self.cfg.create_streams else "; set create_streams=True (s2.create-streams)"
                raise self._error(st, exc, f"basin or stream not found{hint}") from exc
            if not retryable(exc):
                raise self._error(st, exc, "request rejected") from exc
        elif not retryable(exc):
            raise self._error(st, exc, "unexpected error") from exc
        if not self.plan.resend_ambiguous and st.unacked and not no_side_effects(exc):
            raise self._error(
                st, exc, "possibly applied appends are not re-sent in this delivery mode"
            ) from exc

    def _error(self, st: _StreamState, exc: BaseException, why: str) -> WriteError:
        return WriteError(
            f"append to stream {st.name!r} in basin {self.cfg.basin!r} failed: {why} "
            f"(batch {self.plan.batch_id}, partition {self.ctx.partition_id}, "
            f"attempt {self.ctx.attempt_number}): {_describe(exc)}"
        )

    # -- lifecycle -------------------------------------------------------------------------------------

    async def _drain(self) -> None:
        while self.inflight:
            await self._await_oldest()

    async def _release_all(self, healthy: bool) -> None:
        for st in self.streams.values():
            if st.session is not None:
                await self.pool.release(st.session, healthy=healthy and not st.unacked)
                st.session = None

    def finish(self) -> None:
        for name in list(self.open_buffers):
            self._flush(self.streams[name])
        _runtime.run(self._drain())

    def results(self, duration_ms: float) -> pa.RecordBatch:
        rows: list[dict[str, Any]] = [
            {
                "partition": self.ctx.partition_id,
                "attempt": self.ctx.attempt_number,
                "stream": None,
                "rows_in": self.rows_in,
                "records": 0,
                "bytes": 0,
                "appends": 0,
                "retries": 0,
                "skipped": self.skipped,
                "dead_lettered": self.dead_lettered,
                "first_seq": None,
                "end_seq": None,
                "latencies_ms": None,
                "duration_ms": duration_ms,
            }
        ]
        for st in self.streams.values():
            if st.appends == 0 and st.retries == 0:
                continue
            rows.append(
                {
                    "partition": self.ctx.partition_id,
                    "attempt": self.ctx.attempt_number,
                    "stream": st.name,
                    "rows_in": 0,
                    "records": st.records,
                    "bytes": st.bytes,
                    "appends": st.appends,
                    "retries": st.retries,
                    "skipped": 0,
                    "dead_lettered": 0,
                    "first_seq": st.first_seq,
                    "end_seq": st.end_seq,
                    "latencies_ms": st.latencies,
                    "duration_ms": duration_ms,
                }
            )
        return pa.RecordBatch.from_pylist(rows, schema=RESULT_SCHEMA)


def _headers(col: pa.Array) -> list[list[tuple[bytes, bytes]] | None]:
    """``array<struct<name,value>>`` -> per-row header lists, via the flat child arrays (no dicts)."""
    if col.null_count == len(col) or len(col.values) == 0:
        return [None] * len(col)
    offsets: list[int] = col.offsets.to_pylist()
    flat = col.values
    names: list[bytes] = flat.field("name").to_pylist()
    values: list[bytes] = flat.field("value").to_pylist()
    pairs = list(zip(names, values, strict=True))
    valid = col.is_valid().to_pylist() if col.null_count else None
    out: list[list[tuple[bytes, bytes]] | None] = []
    for i in range(len(col)):
        lo, hi = offsets[i], offsets[i + 1]
        out.append(pairs[lo:hi] if hi > lo and (valid is None or valid[i]) else None)
    return out


def _future(ticket: Awaitable[AppendAck]) -> asyncio.Future[AppendAck]:
    """The ticket as a future whose failure is always marked retrieved (stale tickets of a dropped
    session are replaced, never awaited)."""
    fut = asyncio.ensure_future(ticket)
    fut.add_done_callback(_retrieve)
    return fut


def _retrieve(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()


def _acked(chunk: _Chunk) -> bool:
    t = chunk.ticket
    return t is not None and t.done() and not t.cancelled() and t.exception() is None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, S2ServerError):
        return f"{type(exc).__name__} {exc.status_code} {exc.code}: {exc.message}"
    return f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------------------------------------------
# Entry points


def task_context(batch_id: int) -> PartitionContext:
    """The current Spark task's identity (zeros outside Spark, e.g. in unit tests)."""
    tc = TaskContext.get()
    if tc is None:
        return PartitionContext(batch_id, 0, 0, 0, 0)
    return PartitionContext(batch_id, tc.partitionId(), tc.attemptNumber(), tc.taskAttemptId(), tc.stageId())


def write_partition(
    plan: WritePlan, batches: Iterable[pa.RecordBatch], ctx: PartitionContext | None = None
) -> pa.RecordBatch:
    """Append one partition's record frame to S2 and return its result rows (`RESULT_SCHEMA`).

    Blocks the calling (task) thread; all network I/O runs on the process's background loop.
    Raises `EncodeError` for a bad row under ``on_error="fail"``, `FencedError` or `WriteError`
    when appends fail for good. Sessions go back to the pool only when everything was acknowledged.
    """
    ctx = ctx if ctx is not None else task_context(plan.batch_id)
    started = time.monotonic()
    writer = _PartitionWriter(plan, ctx)
    if plan.recovery is not None:
        writer.filter = plan.recovery(plan, ctx)
    healthy = False
    try:
        for batch in batches:
            writer.consume(batch)
        writer.finish()
        where = {"batch": ctx.batch_id, "partition": ctx.partition_id, "attempt": ctx.attempt_number}
        _crashpoints.hit("after_ack_before_task_end", **where)
        healthy = True
    finally:
        _runtime.run(writer._release_all(healthy))
    return writer.results((time.monotonic() - started) * 1000)


def map_partition(plan: WritePlan) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    """A `mapInArrow` function writing each partition with `plan` (a picklable closure)."""

    def _fn(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        yield write_partition(plan, batches)

    return _fn
