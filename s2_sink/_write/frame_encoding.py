"""Where a write task's rows become its record frame: the one encoding step of both front doors.

``foreachBatch(S2Writer)`` ships the columns its encoder reads (and a target stream Spark computed) through
``mapInArrow``; ``format("s2")`` hands its tasks the rows as they are. Each task turns its Arrow batches
into record frames here, adding the target stream of rows routed in Arrow, under ``on_error="dlq"`` a bad
row's payload, and in an exactly-once replay the placement key (`s2_sink._exactly_once.recovery_layout`).
A `FrameEncoding` is plain picklable data built on the driver, after the schema was validated there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import BinaryType, DataType, LongType, StringType, StructField, StructType

from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink.encoders._arrow_json import json_objects
from s2_sink.encoders._frame import ACTION, ERROR, FRAME_COLUMNS, PAYLOAD, frame_arrow_schema

if TYPE_CHECKING:
    from s2_sink._exactly_once.recovery_layout import RecoveryLayout
    from s2_sink.encoders._base import Encoder

__all__ = ["PLACE", "FrameEncoding"]

PLACE = "_s2_place"
"""Frame column of an exactly-once replay: the key Spark's hash partitioning lays the record out by."""

_FRAME = frame_arrow_schema(action=True)
"""Every frame column a write makes, ``_s2_action`` last (only in the upsert changelog's flat form)."""


@dataclass(frozen=True, slots=True)
class FrameEncoding:
    encoder: Encoder | None
    """``None``: the rows are a record frame already (``S2Writer(encoder=None)``)."""
    schema: StructType
    routing: Routing
    keep: tuple[str, ...] = ()
    """Input columns carried into the frame (the ``order_by`` columns the writer sorts by)."""
    payload: bool = False
    """Under ``on_error="dlq"``: add `PAYLOAD`, a bad row's input as JSON (null for good rows)."""
    arranged: bool = True
    """Let the encoder sort and compact each Arrow batch (``format("s2")``; the writer does it in Spark)."""
    layout: RecoveryLayout | None = None
    """An exactly-once replay's content layout: add `PLACE`."""

    def laid_out(self, layout: RecoveryLayout) -> FrameEncoding:
        return replace(self, layout=layout)

    @property
    def flat_changelog(self) -> bool:
        """Upsert changelog headers are carried flat (`s2_sink.encoders._changelog`) unless the encoder
        arranges the batch (its ties compare the list form)."""
        return self.encoder is not None and not (self.arranged and self.encoder.arranges)

    def frames(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows:
                yield self.frame(batch)

    def frame(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        names = self.schema.fieldNames()
        shipped_target = STREAM_COLUMN in names
        payload_columns = [c for c in names if c != STREAM_COLUMN] if self.payload else []
        keep = list(dict.fromkeys([*self.keep, *payload_columns]))
        if self.routing.routed and not shipped_target:
            keep += [c for c in self.routing.source_columns() if c not in keep]
        if shipped_target:
            keep.append(STREAM_COLUMN)
        if self.encoder is None:
            frame = _as_frame(batch, keep)
        else:
            exclude = [*self.routing.body_exclusions(), *([STREAM_COLUMN] if shipped_target else [])]
            frame = self.encoder.encode_frame(
                batch,
                schema=self.schema,
                keep=keep,
                exclude=exclude,
                arranged=self.arranged,
                flat_changelog=self.flat_changelog,
            )
        if self.routing.routed and not shipped_target:
            frame = frame.append_column(STREAM_COLUMN, self.routing.arrow_targets(frame))
        if self.payload:
            frame = frame.append_column(PAYLOAD, self._payload(frame, payload_columns))
        if self.layout is not None:
            frame = frame.append_column(PLACE, self.layout.placement(frame))
        wanted = [*_own_columns(frame), *self.keep, *(f.name for f in self._extra_fields())]
        return frame.select(list(dict.fromkeys(wanted)))

    def _extra_fields(self) -> list[StructField]:
        """The columns a write adds after the frame's and the kept ones."""
        added = (self.routing.routed, self.payload, self.layout is not None)
        types: tuple[DataType, ...] = (StringType(), BinaryType(), LongType())
        fields = zip((STREAM_COLUMN, PAYLOAD, PLACE), types, added, strict=True)
        return [StructField(name, dtype) for name, dtype, on in fields if on]

    def _payload(self, frame: pa.RecordBatch, columns: list[str]) -> pa.Array:
        """A bad row's input columns as JSON (its dead letter's body); null for good rows."""
        errors = frame.column(ERROR)
        if errors.null_count == len(errors):
            return pa.nulls(len(frame), pa.binary())
        bad = pc.is_valid(errors)
        rows = frame.filter(bad)
        text = pc.cast(json_objects(rows, self.schema, columns), pa.binary())
        positions = pc.subtract(pc.cumulative_sum(pc.cast(bad, pa.int64())), 1)
        return pc.if_else(bad, pc.take(text, pc.if_else(bad, positions, 0)), pa.scalar(None, pa.binary()))

    def frame_schema(self) -> StructType:
        if self.encoder is None:  # a record frame already: its own flat changelog, if it has one
            flat = ACTION in self.schema.fieldNames()
        else:
            flat = self.flat_changelog and _is_upsert(self.encoder)
        own = [*FRAME_COLUMNS, *([ACTION] if flat else [])]
        fields = list(from_arrow_schema(pa.schema([_FRAME.field(c) for c in own])).fields)
        fields += [self.schema[c] for c in self.keep if c not in own]
        return StructType(fields + self._extra_fields())

    def map_fn(self) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
        return self.frames


def _own_columns(frame: pa.RecordBatch) -> list[str]:
    return [*FRAME_COLUMNS, *([ACTION] if ACTION in frame.schema.names else [])]


def _is_upsert(encoder: Encoder | None) -> bool:
    from s2_sink.encoders._upsert import UpsertEncoder  # noqa: PLC0415 - encoders import each other lazily

    return isinstance(encoder, UpsertEncoder)


def _as_frame(batch: pa.RecordBatch, keep: list[str]) -> pa.RecordBatch:
    """Rows that are a record frame already: the frame columns it lacks added as nulls, `keep` after."""
    names = batch.schema.names
    fields = [f for f in _FRAME if f.name != ACTION or ACTION in names]
    fields += [batch.schema.field(c) for c in keep if c not in _FRAME.names]
    arrays = [batch.column(f.name) if f.name in names else pa.nulls(batch.num_rows, f.type) for f in fields]
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
