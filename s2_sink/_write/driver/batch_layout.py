"""How `S2Writer` lays a micro-batch out for its write tasks when the batch needs a layout first (an ordered
or compacted changelog, ``partition_by_key``, an exactly-once replay): encoded in a first, narrow stage, then
placed, sorted and, for an ordered changelog, compacted by the write tasks as they read their rows."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from s2_sink._write.driver.routing import STREAM_COLUMN
from s2_sink._write.driver.sizing import narrow
from s2_sink._write.frame_encoding import PLACE, FrameEncoding
from s2_sink._write.task.partition_writer import map_partition, write_partition
from s2_sink.encoders._change_order import compact_changes, last_changes, sort_changes
from s2_sink.encoders._frame import HEADERS, KEY

if TYPE_CHECKING:
    from s2_sink._write.driver.sizing import FrameShape
    from s2_sink._write.write_plan import WritePlan

__all__ = ["Layout", "laid_out"]

Frames = Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]


class Layout(NamedTuple):
    """A micro-batch's record frames laid out for its write tasks (`laid_out`): `frame`, and what each task
    does to its partition's frames before it writes them (`tail`)."""

    frame: DataFrame
    tail: Frames | None
    """``compact=True`` with ``order_by``: `last_changes` (a picklable partial); None: written as they are."""

    def frames(self) -> DataFrame:
        """The record frames the write tasks write (the tail applied)."""
        return self.frame if self.tail is None else self.frame.mapInArrow(self.tail, self.frame.schema)

    def writes(self, plan: WritePlan) -> Frames:
        """The ``mapInArrow`` function of the write stage: each partition's frames written with `plan`."""
        return map_partition(plan) if self.tail is None else functools.partial(_write_tail, plan, self.tail)


def _write_tail(plan: WritePlan, tail: Frames, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield write_partition(plan, tail(batches))


def laid_out(
    rows_df: DataFrame, encoding: FrameEncoding, *, tasks: int, by_key: bool, shape: FrameShape | None = None
) -> Layout:
    """The record frames of `rows_df` laid out for `tasks` write tasks, by Spark: encoded in a first,
    narrow stage (each task the rows of one input partition, in input order), then placed by a replay's
    placement keys (`FrameEncoding.layout`), else by (stream, key) when `by_key`, else narrowed.

    With ``order_by`` each task's rows are sorted by (stream, key) and change order (`sort_changes`), and
    ``compact=True`` is left to the write task (`last_changes`): one shuffle and one sort in all. Without
    ``order_by``, ``compact=True`` is Spark's, across the batch, before the layout (`compact_changes`)."""
    encoder = encoding.encoder
    order = encoder.change_order if encoder is not None else ()
    routed = encoding.routing.routed
    compact = bool(getattr(encoder, "compact", False))
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
        return Layout(frame, None)
    # every change of a (stream, key) is in one task now: sort them together, into change order
    frame = sort_changes(frame, order, routed=routed)
    return Layout(frame, functools.partial(last_changes, routed=routed) if compact else None)
