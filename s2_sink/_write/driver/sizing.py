"""How many tasks write a micro-batch: sized to the batch, not inherited from Spark's partitioning.

Every Python write task costs a fixed ~150-400 ms before its first row (worker hand-off, import-cache
invalidation, session set-up), so an aggregation's 200 state partitions written as they come cost 200 of
those for a few hundred records. The writer instead picks the task count from what Spark knows without
running a job (`FrameShape`: the partition count and the optimizer's size estimate where classic Spark
exposes them, and the cluster's cores), and narrows the frame with ``coalesce(n)``: no shuffle, and a
deterministic function of the parent partitions, so a retried task sees the same rows (exactly-once task
retries rely on that). A recovery layout gets the same n; a layout by key (an ordered upsert) one task
per core (`split_tasks`): it shuffles anyway, and hashing many keys spreads them evenly.

``auto``: ``n = clamp(ceil(bytes / 32 MiB), cores, 2 x cores)``, ``2 x cores`` when the size is unknown.
Fewer tasks than cores save nothing (idle cores run them at once), more than two waves only repeat the
per-task floor. A number (``sink.write-parallelism``/``S2Writer(write_parallelism=n)``) is used as is.

The split, for rows routed to many streams (`StreamSplit`): every task appends to every stream its rows
name, and each (task, stream) costs an append session and its result row whatever the rows, so batches whose
tasks would share their streams widely are repartitioned by target stream (``repartition(n, stream)``: each
stream's rows in one task, a shuffle; one task per core, `split_tasks`). A writer routing by a column or
template starts so: its first batch creates the streams it names, once each when each stream's rows are in
one task. A batch split by stream shows how many streams it named and how many records each got, so when
narrowing could not cost more than the shuffle even if every stream were spread over every task (few
streams, many rows each), the next batches are narrowed. A batch split by stream cannot show whether
narrowing would spread its streams, so every `PROBE_EVERY`-th batch is narrowed again to see; a narrowed
batch whose tasks shared their streams widely makes the next ones split by stream again.
When a task's rows also outweigh what its open chunks may hold (``max_inflight_bytes``), interleaved streams
would each be sent in several small appends as the fullest chunks are shed early, so the split also hands
each task its rows grouped by stream (`StreamSplit.grouped`; the first batch's always) and tells the tasks so
(`StreamSplit.tasks_plan`): each stream's chunk is closed, as its last, when the next stream's rows begin,
and goes as one unary append instead of on a session. Spark does not sort them (a sort by stream name,
whose leading bytes streams share, compares whole strings): it hashes the rows into several small
partitions per task, `coalesce(n)` hands each task a few of them one after another, each row carrying its
partition's number, and the task joins each partition's rows into one Arrow batch (`whole_streams`), which
its frame input groups by stream. Each partition holds whole streams, and its rows keep each input
partition's order (a shuffle block is in map order; the grouping is a stable sort).
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa
from pyspark.sql import functions as F

from s2_sink._option_map import WriteParallelism
from s2_sink._pyspark import spark_errors
from s2_sink._write.driver.routing import STREAM_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from s2_sink._write.write_plan import WritePlan

__all__ = [
    "FrameShape",
    "StreamSplit",
    "cores",
    "frame_shape",
    "narrow",
    "size_estimate",
    "split_tasks",
    "whole_streams",
    "write_tasks",
]

log = logging.getLogger(__name__)

BYTES_PER_TASK: Final = 32 * 1024 * 1024
_DEFAULT_CORES: Final = 8
ROWS_PER_SESSION: Final = 250
"""A (task, stream) beyond one per stream costs about the client CPU of this many rows of a shuffle: so a
batch of two tasks sharing every stream is split while its streams average fewer rows than this. Measured
at 1,000 streams x 100 rows in two tasks (``benchmarks.run --only routed``, narrowed against split): ~0.57
ms of Python CPU per extra (task, stream) (a unary append and a result row) against ~2.1 us of JVM CPU per
row shuffled, a break-even near 270 rows per stream."""
PROBE_EVERY: Final = 16
_PART: Final = "_s2_split_part"
"""The shuffle partition a grouped split's row came from (`StreamSplit.split`)."""
_MAX_GROUPS: Final = 64
"""Shuffle partitions per task at most: the shuffle's cost grows with its partition count."""
Frames = Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]
# The optimizer answers "unknown" with spark.sql.defaultSizeInBytes (Long.MaxValue): not an estimate.
_UNKNOWN_SIZE: Final = 1 << 62


@dataclass(frozen=True, slots=True)
class FrameShape:
    """What Spark knows about a frame before running it; ``None`` = unknown (Spark Connect, no stats)."""

    partitions: int | None
    size_bytes: int | None
    cores: int


def split_tasks(shape: FrameShape, parallelism: WriteParallelism) -> int:
    """The number of write tasks for a batch split by stream: ``auto``, one per core. The hash of many
    streams spreads their rows evenly, and a task's cost is its streams' whatever the count, so a second wave
    of tasks would only repeat the per-task floor."""
    return parallelism if parallelism != "auto" else max(1, shape.cores)


def write_tasks(shape: FrameShape, parallelism: WriteParallelism) -> int:
    """The number of write tasks for a frame of this shape (see module docstring)."""
    if parallelism != "auto":
        return parallelism
    cores = max(1, shape.cores)
    if shape.size_bytes is None:
        return 2 * cores
    return min(max(math.ceil(shape.size_bytes / BYTES_PER_TASK), cores), 2 * cores)


@dataclass(slots=True)
class StreamSplit:
    """Whether a routed batch's write tasks get their rows by target stream or narrowed (module docstring)."""

    held_bytes: int = 16 * 1024 * 1024
    """What a task's open chunks may hold (``max_inflight_bytes``)."""
    by_stream: bool = True
    """The next batch goes by stream (the first one does)."""
    grouped: bool = True
    """Batches split by stream also order each task's rows by stream: a task's rows outweighed
    `held_bytes` (the first batch's are, unknown: a sort costs it less than a stream sent in pieces)."""
    batches: int = 0
    """Batches split by stream since the last narrowed one."""
    task_bytes: int | None = None
    """The most bytes a task of the last batch wrote (None before the first): sizes a grouped split's
    partitions."""

    def next_by_stream(self) -> bool:
        """Whether the next batch is split by stream (counted as one)."""
        if self.by_stream and self.batches < PROBE_EVERY:
            self.batches += 1
            return True
        return False

    def split(self, frame: DataFrame, shape: FrameShape, parallelism: WriteParallelism) -> DataFrame:
        """`frame` in `split_tasks` partitions by target stream (each stream's rows in one task); `grouped`,
        each task reads a few shuffle partitions one after another (`groups`), each row tagged with its
        partition's number (`whole_streams` joins each partition's rows in the task)."""
        n = split_tasks(shape, parallelism)
        if not self.grouped:
            return frame.repartition(n, STREAM_COLUMN)
        parts = n * self.groups(n, shape.size_bytes)
        tagged = frame.repartition(parts, STREAM_COLUMN).withColumn(_PART, F.spark_partition_id())
        return tagged.coalesce(n)

    def groups(self, n: int, size_bytes: int | None) -> int:
        """Shuffle partitions per task of a grouped split: each about half of what a task's open chunks may
        hold, as the last batch's task bytes tell (8 before any), or more where this batch's share of the
        optimizer's `size_bytes` is larger (a batch that outgrew the last one would send each stream in
        pieces). The estimate only raises the count: it measures the input, not the encoded records."""
        last = 8 if self.task_bytes is None else math.ceil(2 * self.task_bytes / self.held_bytes)
        estimated = math.ceil(2 * (size_bytes or 0) / max(n, 1) / self.held_bytes)
        return min(max(last, estimated, 1), _MAX_GROUPS)

    def writes(self, write: Frames) -> Frames:
        """The ``mapInArrow`` function of a batch split so: `write` over the task's rows, each shuffle
        partition's joined into one batch first when `grouped`."""
        return functools.partial(_grouped_writes, write, self.held_bytes) if self.grouped else write

    def tasks_plan(self, plan: WritePlan) -> WritePlan:
        """The plan of a batch split by stream: `grouped` rows come ordered by stream (each stream's chunk
        closes, as its last, when the next stream's rows begin: `WritePlan.rows_by_stream`)."""
        return replace(plan, rows_by_stream=True) if self.grouped else plan

    def observe(self, rows: list[dict[str, object]], rows_in: int, *, by_stream: bool) -> None:
        """A batch's task result rows (one per task and stream). Narrowed: (task, stream) pairs beyond one
        per stream that cost more than a shuffle of the batch's rows make the next batches split by stream.
        Split by stream: the next ones are narrowed when that could not cost more even with every stream
        spread over every task (a stream of r records over at most r of them); else they stay split (until
        the next probe)."""
        streams = [r for r in rows if r["stream"] is not None]
        per_task: dict[object, int] = {r.get("partition"): 0 for r in rows}
        for r in streams:
            task = r.get("partition")
            per_task[task] = per_task.get(task, 0) + int(str(r.get("bytes") or 0))
        if by_stream:
            tasks = len(per_task)
            extra = sum(min(tasks, max(1, int(str(r.get("records") or 0)))) - 1 for r in streams)
        else:
            extra = len(streams) - len({r["stream"] for r in streams})
            self.batches = 0
        self.by_stream = extra * ROWS_PER_SESSION > rows_in
        self.task_bytes = max(per_task.values(), default=0)
        self.grouped = self.by_stream and self.task_bytes > self.held_bytes


def _grouped_writes(
    write: Frames, max_bytes: int, batches: Iterable[pa.RecordBatch]
) -> Iterable[pa.RecordBatch]:
    return write(whole_streams(batches, max_bytes))


def whole_streams(batches: Iterable[pa.RecordBatch], max_bytes: int) -> Iterator[pa.RecordBatch]:
    """A grouped split's task rows as one Arrow batch per shuffle partition (`StreamSplit.split`), in order,
    without the partition column: each batch holds every row of its streams, so the frame input's grouping
    by stream puts each stream's rows together once. A partition over `max_bytes` (a skewed one, or a batch
    beyond its estimate) is handed on in pieces of about that, its streams' rows still in order (a stream
    seen again after its chunk was closed waits for that append, see `WritePlan.rows_by_stream`)."""
    held: list[pa.RecordBatch] = []
    held_bytes = 0
    part: int | None = None
    for batch in batches:
        parts = batch.column(_PART).to_numpy(zero_copy_only=False)
        cuts = [0, *(np.flatnonzero(parts[1:] != parts[:-1]) + 1).tolist(), len(parts)]
        for lo, hi in itertools.pairwise(cuts):
            if hi == lo:
                continue
            if held and (int(parts[lo]) != part or held_bytes >= max_bytes):
                joined, held, held_bytes = _joined(held), [], 0  # the pieces freed before their copy is used
                yield joined
            part = int(parts[lo])
            piece = batch.slice(lo, hi - lo)
            held.append(piece)
            held_bytes += piece.nbytes
    if held:
        yield _joined(held)


def _joined(pieces: list[pa.RecordBatch]) -> pa.RecordBatch:
    table = pa.Table.from_batches(pieces)
    table = table.remove_column(table.schema.get_field_index(_PART)).combine_chunks()
    return table.to_batches()[0]


def narrow(frame: DataFrame, shape: FrameShape, n: int) -> DataFrame:
    """`frame` in at most `n` partitions, without a shuffle (unchanged when it has no more than `n`)."""
    if shape.partitions is not None and shape.partitions <= n:
        return frame
    return frame.coalesce(n)  # a no-op where the partition count is unknown and already small


def frame_shape(frame: DataFrame, size_bytes: int | None) -> FrameShape:
    """The cluster's cores, with `size_estimate`. The partition count is left unknown on purpose: the
    physical RDD's (``queryExecution().toRdd()``) makes adaptive execution run the frame's shuffle stages to
    plan it, a job before the write job; ``coalesce(n)`` over at most ``n`` partitions changes nothing."""
    return FrameShape(None, size_bytes, cores(frame))


def size_estimate(frame: DataFrame) -> int | None:
    """The optimizer's estimate of the frame's size in bytes; ``None`` when it has none (or on Connect)."""
    jdf = getattr(frame, "_jdf", None)
    if jdf is None:
        return None
    try:
        raw = jdf.queryExecution().optimizedPlan().stats().sizeInBytes()
        # py4j hands a Scala BigInt over as a Python int; older gateways as a JVM object.
        size = raw if isinstance(raw, int) else int(str(raw.toString()))
    except spark_errors():  # the JVM failed to plan it, or the gateway refuses or lacks these methods
        log.debug("size estimate unavailable", exc_info=True)
        return None
    return None if size >= _UNKNOWN_SIZE else size


def cores(frame: DataFrame) -> int:
    """The cores Spark runs tasks on (classic: the default parallelism; else its setting, else 8)."""
    spark = frame.sparkSession
    sc = getattr(spark, "_sc", None)  # classic: the SparkContext knows its executors' cores
    if sc is not None:
        try:
            return max(1, int(sc.defaultParallelism))
        except spark_errors():  # a gateway that refuses the call (a locked-down cluster): the setting
            pass
    try:
        text = spark.conf.get("spark.default.parallelism", None) or ""
    except spark_errors():  # a Spark Connect server (or a gateway) that refuses to read the conf: 8
        text = ""
    return int(text) if text.isdigit() and int(text) > 0 else _DEFAULT_CORES
