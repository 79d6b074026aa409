"""The split of a routed batch by target stream, without a shuffle of its rows.

Every write task appends to every stream its rows name, and each (task, stream) costs an append session and
its result row whatever the rows, so a batch routed by a column or template hands each stream's rows to one
task. A ``repartition(n, stream)`` of the rows costs the JVM each row again (written as an UnsafeRow,
compressed, read back); instead a first ``mapInArrow`` over the input partitions (`pack`) groups each Arrow
batch's rows by hash group of their target stream and emits one row per group holding that group's rows as
an Arrow IPC stream, and the shuffle moves only those few rows. Each hash group is one shuffle partition
(``pmod(hash(stream), groups)``, Spark's own partitioning of the group's key, a stream of the group); the
write tasks read a few of them one after another (``coalesce(n)``), and each joins a group's pieces, in the
order of their input partition and batch (Spark fetches map outputs in no fixed order, so a retried task
sees them in another), into one Arrow batch holding whole streams (`unpack`), which its frame input groups
by stream (`WritePlan.rows_by_stream`: each stream's chunk closes, as its last, when the next one's rows
begin, and goes as one unary append).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import functions as F

from s2_sink._write.driver.routing import STREAM_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["PACKED_DDL", "groups", "pack", "split", "unpack"]

_GROUP: Final = "_s2_group"
_MAX_GROUPS: Final = 64
"""Shuffle partitions per task at most: the shuffle's cost grows with its partition count."""
PACKED_DDL: Final = f"{STREAM_COLUMN} string, group int, part int, seq int, rows binary"
"""A packed row: a stream of the group (its shuffle key), the group, the input partition and the batch's
number in it, and the group's rows of that batch as an Arrow IPC stream."""
Frames = Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]


def groups(n: int, size_bytes: int | None, held_bytes: int) -> int:
    """Hash groups per task: each about half of what a task's open chunks may hold by the optimizer's
    estimate of the input (8 when unknown), so a group's streams are sent whole."""
    estimated = math.ceil(2 * (size_bytes or 0) / max(n, 1) / held_bytes)
    return min(max(estimated if size_bytes is not None else 8, 1), _MAX_GROUPS)


def split(frame: DataFrame, n: int, per_task: int) -> DataFrame:
    """`frame`'s rows packed by hash group of their target stream, in `n` partitions of `per_task` groups."""
    count = n * per_task
    hashed = frame.withColumn(_GROUP, F.pmod(F.hash(STREAM_COLUMN), F.lit(count)))
    packed = hashed.mapInArrow(pack, PACKED_DDL)
    return packed.repartition(count, STREAM_COLUMN).coalesce(n)


def pack(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One packed row per hash group of each Arrow batch (`PACKED_DDL`)."""
    tc = TaskContext.get()
    part = tc.partitionId() if tc is not None else 0
    for seq, batch in enumerate(batches):
        if batch.num_rows == 0:
            continue
        ids = batch.column(_GROUP).to_numpy(zero_copy_only=False)
        order = np.argsort(ids, kind="stable")
        rows = batch.drop_columns([_GROUP]).take(pa.array(order))
        ids = ids[order]
        starts = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist()]
        ends = [*starts[1:], len(ids)]
        stream = rows.column(STREAM_COLUMN)
        keys, group_ids, offsets = [], [], [0]
        sink = pa.BufferOutputStream()  # the groups' IPC streams one after another: one binary column
        for lo, hi in zip(starts, ends, strict=True):
            piece = rows.slice(lo, hi - lo)
            with pa.ipc.new_stream(sink, piece.schema) as out:
                out.write_batch(piece)
            keys.append(stream[lo].as_py())
            group_ids.append(int(ids[lo]))
            offsets.append(sink.tell())
        data = sink.getvalue()
        blobs = pa.Array.from_buffers(
            pa.binary(), len(keys), [None, pa.array(offsets, pa.int32()).buffers()[1], data]
        )
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(keys, pa.string()),
                pa.array(group_ids, pa.int32()),
                pa.array([part] * len(keys), pa.int32()),
                pa.array([seq] * len(keys), pa.int32()),
                blobs,
            ],
            names=[STREAM_COLUMN, "group", "part", "seq", "rows"],
        )


def writes(write: Frames) -> Frames:
    """The write stage's ``mapInArrow`` function: `write` over the task's groups, each joined (`unpack`)."""
    return functools.partial(_unpacked_writes, write)


def _unpacked_writes(write: Frames, batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    return write(unpack(batches))


def unpack(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Each hash group's rows as one Arrow batch, its pieces in (input partition, batch) order."""
    held: list[tuple[int, int, bytes]] = []
    group: int | None = None
    for batch in batches:
        cols = batch.to_pydict()
        for g, p, s, blob in zip(cols["group"], cols["part"], cols["seq"], cols["rows"], strict=True):
            if held and g != group:
                yield _joined(held)
                held = []
            group = g
            held.append((p, s, blob))
    if held:
        yield _joined(held)


def _joined(pieces: list[tuple[int, int, bytes]]) -> pa.RecordBatch:
    pieces.sort(key=lambda x: (x[0], x[1]))
    tables = [pa.ipc.open_stream(blob).read_all() for _, _, blob in pieces]
    return pa.concat_tables(tables).combine_chunks().to_batches()[0]
