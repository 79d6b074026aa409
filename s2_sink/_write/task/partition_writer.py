"""One Spark task's records appended to S2: the entry points (`write_partition`, `map_partition`) and the
path a row travels inside the task, in row order: `FrameInput` turns each Arrow batch of the record frame
into SDK records or Arrow slices (bad rows to `BadRows`); the `Chunker` cuts each stream's records into
appends, deterministically; each closed chunk is filtered by the recovery hook's `RecordFilter` (exactly-once
task retries), tagged and serialized, and handed to the `Appender` in groups (one hop to the event loop per
group, not per chunk); the task returns small per-stream result rows (`results.RESULT_SCHEMA`).

Memory stays bounded: one Arrow batch at a time; at most ``max_buffered_requests`` partial chunks of at most
``max_inflight_bytes`` together; at most 16 closed chunks waiting for their hand-over, never past their Arrow
batch; sent chunks kept only until acknowledged.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, cast

import pyarrow as pa
from pyspark import TaskContext
from s2_sdk import Record

from s2_sink import _crashpoints
from s2_sink._transport import runtime as _runtime
from s2_sink._write.task.appender import Appender
from s2_sink._write.task.chunker import Chunker
from s2_sink._write.task.dead_letters import BadRows
from s2_sink._write.task.frame_records import FrameInput, FrameSpan, records_of, serialize_spans
from s2_sink._write.task.results import StreamTotals, result_rows
from s2_sink._write.task.tickets import Chunk
from s2_sink._write.task.worker_gc import freeze_imports
from s2_sink._write.task.zip_finders import forget_zip_finders
from s2_sink._write.write_plan import ChunkInfo, PartitionContext, RecordFilter, WritePlan
from s2_sink.encoders._frame import MAX_RECORD_BYTES
from s2_sink.encoders._metered import RECORD_OVERHEAD, header_size, metered_size
from s2_sink.errors import WriteError

if TYPE_CHECKING:
    from s2_sink._write.frame_encoding import FrameEncoding

__all__ = ["map_partition", "task_context", "write_partition"]

_HAND_OVER_CHUNKS = 16
"""Closed chunks handed to the event loop together, at most (and never more than
``max_inflight_requests``): each hop costs both threads a wake-up, and cutting the rest of an Arrow
batch, already serialized as a whole, is quick, so the server waits little for its first appends."""


class _PartitionWriter:
    """Wires one task's path together: frame input -> chunker -> filter and tag -> appender."""

    def __init__(self, plan: WritePlan, ctx: PartitionContext) -> None:
        cfg = plan.cfg
        self.plan = plan
        self.ctx = ctx
        max_bytes = cfg.flush_buffer_bytes - plan.chunk_tag_reserve
        max_record = MAX_RECORD_BYTES - plan.chunk_tag_reserve
        if max_bytes < RECORD_OVERHEAD:  # not even an empty record would fit
            raise WriteError(
                f"flush_buffer_bytes ({cfg.flush_buffer_bytes}) leaves no room after the "
                f"{plan.chunk_tag_reserve}-byte chunk tag"
            )
        self.filter: RecordFilter | None = None
        self.chunker: Chunker[Record | FrameSpan] = Chunker(
            max_records=cfg.batch_max_records,
            max_bytes=max_bytes,
            max_open=cfg.max_buffered_requests,
            max_held=cfg.max_inflight_bytes,
            emit=self._send,
        )
        self.bad_rows = BadRows(plan, ctx, max_record)
        self.input = FrameInput(plan, self.chunker, self.bad_rows, max_record, ended=self._stream_ended)
        self.appender = Appender(plan, ctx)
        self.closed: list[Chunk] = []
        """Chunks closed since the last hand-off to the appender, in order."""
        self.closed_bytes = 0
        self.ending = False
        """The end of the input: the chunks closed now are their streams' last (`Chunk.last`)."""

    def start(self) -> None:
        """Run the recovery hook (before the first row); without a filter, the bulk path may serve."""
        if self.plan.recovery is not None:
            self.filter = self.plan.recovery(self.plan, self.ctx)
        self.input.spans = self.filter is None

    def _stream_ended(self, stream: str) -> None:
        """`stream`'s rows have ended (`WritePlan.rows_by_stream`): its partial chunk is its last."""
        self.ending = True
        try:
            self.chunker.close(stream)
        finally:
            self.ending = False

    def _send(self, stream: str, index: int, items: list[Record | FrameSpan], nbytes: int) -> None:
        """A closed chunk: drop what an earlier attempt already wrote, tag it, append it."""
        spans = [i for i in items if isinstance(i, FrameSpan)]
        if len(spans) == len(items):
            self._send_spans(stream, index, spans, nbytes)
            return
        # Records only, or (rarely: a batch with bad rows among all-good ones) both: the record path.
        records = _records(items) if spans else cast(list[Record], items)
        if self.filter is not None:
            kept = self.filter(stream, records)
            if len(kept) != len(records):
                nbytes = sum(metered_size(r.body, r.headers) for r in kept)
            records = kept
            if not records:
                return
        if self.plan.chunk_tagger is not None:
            name, value = self._tag(ChunkInfo(stream, index, len(records), nbytes))
            tag_size = header_size(name, value)
            first = records[0]  # the tag goes last: positional readers of @key/@action stay undisturbed
            records = [Record(first.body, [*first.headers, (name, value)], first.timestamp), *records[1:]]
            nbytes += tag_size
        self._submit(Chunk(stream, index, len(records), nbytes, records=records, last=self.ending))

    def _send_spans(self, stream: str, index: int, spans: list[FrameSpan], nbytes: int) -> None:
        """A closed chunk of Arrow slices (no recovery filter is active): tag it, serialize it in bulk,
        append it."""
        count = sum(len(s) for s in spans)
        tag = None
        if self.plan.chunk_tagger is not None:
            tag = self._tag(ChunkInfo(stream, index, count, nbytes))
            nbytes += header_size(*tag)
        self._submit(Chunk(stream, index, count, nbytes, wire=serialize_spans(spans, tag), last=self.ending))

    def _tag(self, info: ChunkInfo) -> tuple[bytes, bytes]:
        assert self.plan.chunk_tagger is not None
        name, value = self.plan.chunk_tagger(self.ctx, info)
        tag_size = header_size(name, value)
        if tag_size > self.plan.chunk_tag_reserve:
            raise WriteError(
                f"chunk tag of {tag_size} bytes exceeds its {self.plan.chunk_tag_reserve}-byte reserve"
            )
        return name, value

    def _submit(self, chunk: Chunk) -> None:
        # Each hop to the event loop wakes it through its self-pipe and the task thread through a
        # future: one hop per chunk cost a third of the write path's CPU (benchmarks.writer_path). So
        # closed chunks are handed over in groups, and at the end of each Arrow batch.
        self.closed.append(chunk)
        self.closed_bytes += chunk.nbytes
        cfg = self.plan.cfg
        if len(self.closed) >= min(_HAND_OVER_CHUNKS, cfg.max_inflight_requests) or (
            self.closed_bytes >= cfg.max_inflight_bytes
        ):
            self.hand_over()

    def hand_over(self) -> None:
        """Append the closed chunks, in order (blocks while the in-flight bounds are reached)."""
        if self.closed:
            chunks, self.closed, self.closed_bytes = self.closed, [], 0
            _runtime.run(self._append(chunks))

    async def _append(self, chunks: list[Chunk], *, drain: bool = False) -> None:
        # Streams new to this task are created (if missing) together, not one per append in turn.
        await self.appender.create_streams(c.stream for c in chunks)
        for chunk in chunks:
            # Fault-suite crash points (inert unless S2SINK_CRASH_PLAN is set): tests/faults.
            _crashpoints.hit("before_append", **self.ctx.where(chunk.index))
            await self.appender.submit(chunk)
        if drain:
            await self.appender.drain()

    def consume(self, batch: pa.RecordBatch) -> None:
        """One Arrow batch of the frame: its closed chunks are appended before the next batch is read."""
        self.input.consume(batch)
        self.hand_over()

    def finish(self) -> None:
        """Send the partial chunks and await every acknowledgement."""
        self.ending = True
        self.chunker.flush()
        chunks, self.closed, self.closed_bytes = self.closed, [], 0
        _runtime.run(self._append(chunks, drain=True))

    def results(self, duration_ms: float) -> pa.RecordBatch:
        streams: list[tuple[str, StreamTotals]] = []
        read_ends = self.filter.read_ends if self.filter is not None else {}
        for name in self.chunker.streams:
            totals = self.appender.totals(name)
            if name in read_ends:
                totals = totals if totals is not None else StreamTotals(latency_sample=0)
                totals.covers(read_ends[name])
            if totals is not None:
                streams.append((name, totals))
        return result_rows(
            self.ctx,
            rows_in=self.input.rows_in,
            skipped=self.bad_rows.skipped,
            dead_lettered=self.bad_rows.dead_lettered,
            streams=streams,
            duration_ms=duration_ms,
        )


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
    writer.start()
    healthy = False
    try:
        for batch in batches:
            writer.consume(batch)
        writer.finish()
        where = {"batch": ctx.batch_id, "partition": ctx.partition_id, "attempt": ctx.attempt_number}
        _crashpoints.hit("after_ack_before_task_end", **where)
        healthy = True
    finally:
        _runtime.run(writer.appender.release_all(healthy))
        forget_zip_finders()
        freeze_imports()
    return writer.results((time.monotonic() - started) * 1000)


def map_partition(
    plan: WritePlan, encoding: FrameEncoding | None = None
) -> Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]:
    """A `mapInArrow` function writing each partition with `plan` (a picklable closure): its rows encoded
    by `encoding`, or (``None``) record frames already."""

    def _fn(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
        yield write_partition(plan, batches if encoding is None else encoding.frames(batches))

    return _fn


def _records(items: list[Record | FrameSpan]) -> list[Record]:
    """A chunk's items as records, in order (spans expanded)."""
    out: list[Record] = []
    for item in items:
        out.extend(records_of([item]) if isinstance(item, FrameSpan) else [item])
    return out
