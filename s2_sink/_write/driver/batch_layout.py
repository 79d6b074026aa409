"""How `S2Writer` lays a micro-batch out for its write tasks when the batch needs a layout first (an ordered
changelog, a compacted one, ``partition_by_key``, an exactly-once replay).

An ordered changelog's input rows are placed and sorted by Spark by (stream, key) and change order, then
encoded, tie-ordered, compacted and appended by the write tasks in one Python stage (`ordered_rows`).
Otherwise the rows are encoded in a first, narrow stage, then placed (and, in a replay, sorted) by Spark
for the write tasks."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DoubleType, FloatType, StructType

from s2_sink._write.driver.routing import STREAM_COLUMN
from s2_sink._write.driver.sizing import narrow
from s2_sink._write.frame_encoding import PLACE, FrameEncoding
from s2_sink._write.task.partition_writer import write_partition
from s2_sink.encoders._change_order import col, compact_changes, in_change_order, last_changes, sort_changes
from s2_sink.encoders._frame import HEADERS, KEY

if TYPE_CHECKING:
    from s2_sink._write.driver.sizing import FrameShape
    from s2_sink._write.write_plan import WritePlan

__all__ = ["Layout", "laid_out"]

Frames = Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]


class Layout(NamedTuple):
    """A micro-batch laid out for its write tasks (`laid_out`): `frame`, what each task does to its
    partition's rows to get the record frames it writes (`tail`), and their schema."""

    frame: DataFrame
    tail: Frames | None
    """A picklable partial (`_task_frames`); None: `frame` holds the record frames, written as they are."""
    schema: StructType

    def frames(self) -> DataFrame:
        """The record frames the write tasks write (the tail applied)."""
        return self.frame if self.tail is None else self.frame.mapInArrow(self.tail, self.schema)

    def writes(self, plan: WritePlan) -> Frames:
        """The ``mapInArrow`` function of the write stage: each partition's frames written with `plan`."""
        return functools.partial(_write, plan, self.tail)


def _write(
    plan: WritePlan, tail: Frames | None, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    yield write_partition(plan, batches if tail is None else tail(batches))


def _task_frames(
    encoding: FrameEncoding | None,
    order: Sequence[str],
    routed: bool,
    compact: bool,
    batches: Iterable[pa.RecordBatch],
) -> Iterable[pa.RecordBatch]:
    """A write task's record frames of an ordered changelog: its rows encoded (unless `encoding` is None:
    record frames already), each run of tied changes put in order of its bytes, then compacted."""
    frames = batches if encoding is None else encoding.frames(batches)
    frames = in_change_order(frames, order, routed=routed)
    return last_changes(frames, routed=routed) if compact else frames


def laid_out(
    rows_df: DataFrame, encoding: FrameEncoding, *, tasks: int, by_key: bool, shape: FrameShape | None = None
) -> Layout:
    """The rows of `rows_df` laid out for `tasks` write tasks.

    With ``order_by`` (and no replay) the input rows themselves are placed and sorted (`ordered_rows`) and
    each write task encodes them: one shuffle, one sort and one Python stage. Otherwise they are encoded in
    a first, narrow stage (each task the rows of one input partition, in input order), then placed by a
    replay's placement keys (`FrameEncoding.layout`; with ``order_by``, sorted by (stream, key) and change
    order there, `sort_changes`), else by (stream, key) when `by_key`, else narrowed. ``compact=True``
    with ``order_by`` is the write task's (`last_changes`); without, Spark's, across the batch, before the
    layout (`compact_changes`)."""
    encoder = encoding.encoder
    order = encoder.change_order if encoder is not None else ()
    routed = encoding.routing.routed
    compact = bool(getattr(encoder, "compact", False))
    if order and encoding.layout is None:
        tail = functools.partial(_task_frames, encoding, order, routed, compact)
        return Layout(ordered_rows(rows_df, encoding, tasks), tail, encoding.frame_schema())
    frame = rows_df.mapInArrow(encoding.map_fn(), encoding.frame_schema())
    if encoder is not None and encoder.headers_column is None:
        # Always null then; an array of structs is costly in every shuffle, sort and Arrow conversion.
        frame = frame.drop(HEADERS)
    if compact and not order:
        frame = compact_changes(frame)
    if encoding.layout is not None:  # a replay's layout wins
        frame = frame.repartition(tasks, F.col(PLACE))
    elif by_key:
        frame = frame.repartition(tasks, *([STREAM_COLUMN] if routed else []), KEY)
    elif shape is not None:
        frame = narrow(frame, shape, tasks)
    if not order:
        return Layout(frame, None, frame.schema)
    # every change of a (stream, key) is in one task now: sort them together, into change order
    group = [F.col(c) for c in ([STREAM_COLUMN] if routed else [])] + [F.col(KEY)]
    group.insert(0, F.xxhash64(*group))  # JSON keys begin alike
    tail = functools.partial(_task_frames, None, order, routed, compact)
    return Layout(sort_changes(frame, group, order), tail, frame.schema)


def ordered_rows(rows_df: DataFrame, encoding: FrameEncoding, tasks: int) -> DataFrame:
    """An ordered changelog's input rows placed by (stream, key) and sorted by it and change order
    (`sort_changes`), by their own columns: the stream where Spark computes it (shards are a function of
    the key), the key columns, a float key's text and a collated string's bytes (-0.0 and 0.0, or "A" and
    "a" under UTF8_LCASE, are one value to Spark but two keys), the ``order_by`` columns. No
    hash leads the sort: a key column's own prefix tells rows apart, and rows that come in key order (per
    input partition) are sorted in near-linear time."""
    encoder = encoding.encoder
    assert encoder is not None
    keys: tuple[str, ...] = getattr(encoder, "key_columns")  # noqa: B009 - an ordered encoder has keys
    schema = encoding.schema
    group = [col(c) for c in ([STREAM_COLUMN] if STREAM_COLUMN in schema.fieldNames() else []) + list(keys)]
    group += [col(k).cast("string") for k in keys if isinstance(schema[k].dataType, FloatType | DoubleType)]
    group += [col(k).cast("binary") for k in keys if _collated(schema[k].dataType)]
    return sort_changes(rows_df.repartition(tasks, *group), group, encoder.change_order)


def _collated(dtype: DataType) -> bool:
    """A string type whose collation is not byte order (pyspark before 4 has no collations)."""
    return getattr(dtype, "collation", "UTF8_BINARY") != "UTF8_BINARY"
