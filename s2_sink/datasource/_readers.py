"""``spark.read.format("s2")`` and ``spark.readStream.format("s2")``: Spark's reader APIs over the planning
(`MicroBatches`, `batch_ranges`), and a task's read of its partition (`read_partition`): the session's
records into the rows of the read's kind.

Spark pickles a reader into every task, whose fresh worker imports this module: the planning, the session
and the rows are imported where they run. Per-trigger limits take two Spark APIs: pyspark 4.1 gives
``latestOffset()`` neither a start nor a limit, so the reader caps relative to a frontier it tracks
(restored on restart by ``partitions(latest, latest)``); pyspark 4.2+ passes both, and
``prepareForTriggerAvailableNow()`` fixes the tails an AvailableNow run drains (docs/format-s2.md,
*Per-trigger limits*).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from s2_sink._read.partition import S2Partition
from s2_sink._read.rows.schemas import RowsKind, rows_kind

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from s2_sink._read.planning.data_loss import LossPolicy
    from s2_sink._read.read_options import ReadOptions
    from s2_sink._wire.columns import RecordColumns, StreamRuns
    from s2_sink.config import S2Config

    ToBatch = Callable[[StructType, str | StreamRuns, RecordColumns, pa.Schema], pa.RecordBatch]

__all__ = ["S2BatchReader", "S2StreamReader", "batch_of", "columns_to_batch", "read_partition"]


class S2BatchReader(DataSourceReader):
    """Plans the ranges on the driver, small streams sharing a partition."""

    def __init__(self, cfg: S2Config, opts: ReadOptions, schema: StructType) -> None:
        self._cfg = cfg
        self._opts = opts
        self._schema = schema
        self._kind = rows_kind(opts.format, schema)  # on the driver: how every task makes its rows

    def partitions(self) -> list[InputPartition]:
        from s2_sink._read.planning.micro_batches import batch_ranges  # noqa: PLC0415 - the driver's

        parts = batch_ranges(self._cfg, self._opts)
        return [S2Partition(ranges, materialize=self._opts.materialize) for ranges in parts]

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        # A batch read takes what is retained between its bounds: records trimmed before it are not a loss.
        return read_partition(self._cfg, self._kind, self._schema, partition, on_loss="ignore")


_STREAMING = "pyspark.sql.streaming.datasource"
try:  # pyspark 4.2+'s SupportsTriggerAvailableNow (Spark checks it with isinstance); ``object`` before
    _AVAILABLE_NOW: type = importlib.import_module(_STREAMING).SupportsTriggerAvailableNow
except (ImportError, AttributeError):
    _AVAILABLE_NOW = object


def _read_limit(name: str, **fields: int) -> object:
    return getattr(importlib.import_module(_STREAMING), name)(**fields)


class S2StreamReader(DataSourceStreamReader, _AVAILABLE_NOW):  # type: ignore[misc]
    """Driver-side planner of micro-batches; ``read`` runs on executors."""

    def __init__(self, cfg: S2Config, opts: ReadOptions, schema: StructType) -> None:
        from s2_sink._read.planning.micro_batches import MicroBatches  # noqa: PLC0415 - the driver's
        from s2_sink.encoders._arrow_types import to_arrow_schema  # noqa: PLC0415

        self._cfg = cfg
        self._opts = opts
        self._schema = schema
        self._plan = MicroBatches(cfg, opts)
        self._target = to_arrow_schema(schema)  # on the driver, once: every task's batches are of it
        self._kind = rows_kind(opts.format, schema)  # and how every task makes them

    def initialOffset(self) -> dict[str, object]:
        return self._plan.initial()

    def latestOffset(self, start: dict[str, object] | None = None, limit: object = None) -> dict[str, object]:
        max_records, max_bytes = self._caps(limit)
        return self._plan.latest(start, max_records, max_bytes)

    def _caps(self, limit: object) -> tuple[int | None, int | None]:
        """(records, bytes) caps for a batch: the options', unless Spark asks for everything."""
        if type(limit).__name__ == "ReadAllAvailable":
            # Trigger.Once and the like: the engine wants all of it, whatever the options say.
            return None, None
        records = getattr(limit, "max_rows", None) or self._opts.max_records_per_trigger
        byte_cap = getattr(limit, "max_bytes", None) or self._opts.max_bytes_per_trigger
        return records, byte_cap

    def getDefaultReadLimit(self) -> object:
        if self._opts.max_records_per_trigger is not None:
            # With both caps set the byte cap comes from the options (one ReadLimit per call).
            return _read_limit("ReadMaxRows", max_rows=self._opts.max_records_per_trigger)
        if self._opts.max_bytes_per_trigger is not None:
            return _read_limit("ReadMaxBytes", max_bytes=self._opts.max_bytes_per_trigger)
        return _read_limit("ReadAllAvailable")

    def prepareForTriggerAvailableNow(self) -> None:
        self._plan.drain_to_tails()

    def reportLatestOffset(self) -> dict[str, int] | None:
        """pyspark 4.2+: the tails seen last, the source's latest offset in the query progress."""
        return self._plan.tails_seen()

    def partitions(self, start: dict[str, object], end: dict[str, object]) -> list[InputPartition]:
        return [S2Partition(ranges) for ranges in self._plan.ranges(start, end)]

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        policy: LossPolicy = "fail" if self._opts.fail_on_data_loss else "warn"
        kind, schema = self._kind, self._schema
        return read_partition(self._cfg, kind, schema, partition, on_loss=policy, target=self._target)

    def commit(self, end: dict[str, object]) -> None:
        # Nothing to release: S2 keeps records by retention, not by consumer acknowledgement.
        return None


def batch_of(kind: RowsKind) -> ToBatch:
    """The rows kind's conversion: ``(schema, stream, columns, target)`` to one batch of the records' rows."""
    from s2_sink._read.rows import record_rows, upsert_rows  # noqa: PLC0415 - the task's

    kinds: dict[str, ToBatch] = {
        "raw": record_rows.raw_batch,
        "json": record_rows.json_batch,
        "kafka": record_rows.kafka_batch,
        "upsert": upsert_rows.changes_batch,
        "typed-upsert": upsert_rows.typed_batch,
    }
    return kinds[kind]


def columns_to_batch(
    kind: RowsKind,
    schema: StructType,
    parts: Sequence[tuple[str, RecordColumns]],
    target: pa.Schema | None = None,
) -> pa.RecordBatch:
    """One batch in exactly ``schema``'s Arrow types from the record columns of one stream or of several,
    converted together (a conversion costs Arrow calls whatever its length); a record that fails fails as in
    its own stream's batch, naming that stream."""
    from s2_sink._wire.columns import StreamRuns, concat_columns  # noqa: PLC0415 - the task's
    from s2_sink.encoders._arrow_types import to_arrow_schema  # noqa: PLC0415
    from s2_sink.errors import ReadError  # noqa: PLC0415

    to_batch, target = batch_of(kind), to_arrow_schema(schema) if target is None else target
    if len(parts) == 1:
        return to_batch(schema, *parts[0], target)
    runs = StreamRuns(tuple((stream, len(columns)) for stream, columns in parts))
    try:
        return to_batch(schema, runs, concat_columns([columns for _, columns in parts]), target)
    except ReadError:
        for stream, columns in parts:  # the failing stream's own error, naming it
            to_batch(schema, stream, columns, target)
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
    handled by ``on_loss``. Small ranges' rows go to Spark together, about `RUN_RECORDS` at a time."""
    from s2_sink._read.planning.data_loss import gap_handler  # noqa: PLC0415 - the task's
    from s2_sink._read.rows.upsert_rows import materialized_batches  # noqa: PLC0415
    from s2_sink._read.session import RUN_BYTES, RUN_RECORDS, read_range_columns, read_ranges_columns  # noqa: PLC0415
    from s2_sink.encoders._arrow_types import to_arrow_schema  # noqa: PLC0415

    if partition is None:  # Spark plans one partition of None when there are no ranges to read
        return
    assert isinstance(partition, S2Partition)
    target = to_arrow_schema(schema) if target is None else target

    def on_gap(stream: str, first: int, stop: int) -> None:  # the loss policy's code runs on a loss only
        gap_handler(cfg.basin, stream, on_loss)(first, stop)

    if partition.materialize:
        # The latest row per key needs each stream's records in order: one range after the other.
        for stream, first, stop in partition.ranges:
            records = read_range_columns(cfg, stream, first, stop, functools.partial(on_gap, stream))
            yield from materialized_batches(batch_of(kind), schema, stream, records, target)
        return
    pending: list[tuple[str, RecordColumns]] = []
    rows = size = 0
    for stream, columns in read_ranges_columns(cfg, partition.ranges, on_gap):
        commands = columns.commands()
        data = columns.take(~commands) if commands.any() else columns
        if not len(data):
            continue
        pending.append((stream, data))
        rows, size = rows + len(data), size + data.bodies.nbytes
        if rows >= RUN_RECORDS or size >= RUN_BYTES:
            yield columns_to_batch(kind, schema, pending, target)
            pending, rows, size = [], 0, 0
    if pending:
        yield columns_to_batch(kind, schema, pending, target)
