"""A task's read of its partition: ranges several at a time, gaps reported under the loss policy, and runs of
several streams handed to Spark as rows of the read's kind. Imported by the task only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Sequence
from typing import Final, TypeVar

import numpy as np
import pyarrow as pa
import s2_sdk
from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from s2_sink._read.partition import S2Partition
from s2_sink._read.planning.data_loss import LossPolicy, gap_handler
from s2_sink._read.rows.record_rows import json_batch, kafka_batch, raw_batch
from s2_sink._read.rows.schemas import RowsKind
from s2_sink._read.rows.upsert_rows import changes_batch, materialized_batches, typed_batch
from s2_sink._read.session import (
    RUN_BYTES,
    RUN_RECORDS,
    UNARY_RECORDS,
    Held,
    Range,
    decode_held,
    read_columns,
    read_error_words,
    read_unary,
)
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._transport.sdk import TransportError
from s2_sink._wire.columns import Positions, RecordColumns, StreamRuns, concat_columns
from s2_sink.config import S2Config
from s2_sink.encoders._arrow_types import to_arrow_schema
from s2_sink.errors import ReadError

__all__ = [
    "BATCH_OF",
    "RANGE_CONCURRENCY",
    "columns_to_batch",
    "missing",
    "read_partition",
    "read_range_columns",
    "read_ranges_columns",
    "several_to_batch",
]

_T = TypeVar("_T")


BATCH_OF: Final = {
    "raw": raw_batch,
    "json": json_batch,
    "kafka": kafka_batch,
    "upsert": changes_batch,
    "typed-upsert": typed_batch,
}
"""Each rows kind's conversion: ``(schema, stream, columns, target)`` to one batch of the records' rows."""


def columns_to_batch(
    kind: RowsKind,
    schema: StructType,
    stream: str | StreamRuns,
    columns: RecordColumns,
    target: pa.Schema | None = None,
) -> pa.RecordBatch:
    """One batch in exactly ``schema``'s Arrow types from the record columns of one stream, or of several one
    after the other (`StreamRuns`: errors then name them all).
    """
    return BATCH_OF[kind](schema, stream, columns, to_arrow_schema(schema) if target is None else target)


def several_to_batch(
    kind: RowsKind,
    schema: StructType,
    parts: Sequence[tuple[str, RecordColumns]],
    target: pa.Schema | None = None,
) -> pa.RecordBatch:
    """The records of several streams converted together (a conversion costs Arrow calls whatever its
    length); a record that fails fails as in its own stream's batch, naming that stream.
    """
    if len(parts) == 1:
        return columns_to_batch(kind, schema, *parts[0], target)
    runs = StreamRuns(tuple((stream, len(columns)) for stream, columns in parts))
    try:
        return columns_to_batch(kind, schema, runs, concat_columns([columns for _, columns in parts]), target)
    except ReadError:
        for stream, columns in parts:  # the failing stream's own error, naming it
            columns_to_batch(kind, schema, stream, columns, target)
        raise


def read_partition(
    cfg: S2Config,
    kind: RowsKind,
    schema: StructType,
    partition: InputPartition | None,
    *,
    on_loss: LossPolicy,
    target: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    """Every data record of the ranges as batches of ``kind``'s rows; records trimmed or expired are
    handled by ``on_loss``. Small ranges' rows go to Spark together, about `RUN_RECORDS` at a time.
    """
    if partition is None:  # Spark plans one partition of None when there are no ranges to read
        return
    assert isinstance(partition, S2Partition)
    target = to_arrow_schema(schema) if target is None else target

    def on_gap(stream: str, first: int, stop: int) -> None:  # the loss policy's code runs on a loss only
        gap_handler(cfg.basin, stream, on_loss)(first, stop)

    if partition.materialize:
        # The latest row per key needs each stream's records in order: one range after the other.
        for stream, first, stop in partition.ranges:
            gaps = functools.partial(on_gap, stream)
            to_batch = BATCH_OF[kind]
            records = read_range_columns(cfg, stream, first, stop, gaps)
            yield from materialized_batches(to_batch, schema, stream, records, target)
        return
    pending: list[tuple[str, RecordColumns]] = []
    rows = size = 0
    runs = read_ranges_columns(cfg, partition.ranges, on_gap)
    for stream, columns in runs:  # runs of several read batches of one range (`RUN_RECORDS`)
        commands = columns.commands()
        data = columns.take(~commands) if commands.any() else columns
        if not len(data):
            continue
        pending.append((stream, data))
        rows, size = rows + len(data), size + data.bodies.nbytes
        if rows >= RUN_RECORDS or size >= RUN_BYTES:
            yield several_to_batch(kind, schema, pending, target)
            pending, rows, size = [], 0, 0
    if pending:
        yield several_to_batch(kind, schema, pending, target)


async def _range_runs(
    cfg: S2Config, stream: str, first: int, stop: int, on_gap: Callable[[int, int], None], *, run_records: int
) -> AsyncGenerator[Held, None]:
    handle = get_pool().client(cfg).basin(cfg.basin).stream(stream)
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
