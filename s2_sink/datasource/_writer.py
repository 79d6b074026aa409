"""``df.write.format("s2")`` and ``df.writeStream.format("s2")``: executors append through the writer core.

Each task encodes its Arrow batches with the configured encoder's ``encode_arrow`` (bad rows are left in
``_s2_error`` for the core's ``on_error`` handling), adds the target-stream column when rows are routed, and
hands the record frame to ``_partition_writer.write_partition``: the same chunking, pooled sessions and
retries as ``S2Writer``. The driver's ``commit`` aggregates the tasks' result rows into ``BatchMetrics``.

Delivery is at-least-once: a retried task or a replayed micro-batch may append records again. A Python
streaming sink's driver side is re-created for every micro-batch (SPARK-48330) and its executors learn the
batch id only from a task-local property, so exactly-once delivery (ledger, fencing, read-back) is offered
by ``S2Writer`` through ``foreachBatch``, not here.
"""

from __future__ import annotations

import logging
import string
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from s2_sink._metrics import BatchMetrics, aggregate
from s2_sink._partition_writer import WritePlan, write_partition
from s2_sink._routing import STREAM_COLUMN, Routing
from s2_sink.config import S2Config
from s2_sink.datasource._write_options import WriteOptions
from s2_sink.errors import ConfigError

__all__ = ["S2BatchWriter", "S2StreamWriter", "check_overwrite"]

log = logging.getLogger(__name__)

_BATCH_ID_PROPERTY = "streaming.sql.batchId"


class S2CommitMessage(WriterCommitMessage):
    """One task's result rows (``_partition_writer.RESULT_SCHEMA`` as dicts) and its wall time."""

    def __init__(self, rows: list[dict[str, Any]], duration_s: float) -> None:
        self.rows = rows
        self.duration_s = duration_s


def check_overwrite(overwrite: bool) -> None:
    """S2 streams are append-only logs: refuse overwrite / complete output mode on the driver."""
    if overwrite:
        raise ConfigError(
            "format('s2') only appends: S2 streams cannot be overwritten; use mode('append') "
            "(or outputMode('append'/'update') for streaming)"
        )


def _targets(frame: pa.RecordBatch, routing: Routing) -> pa.Array:
    """Each row's target stream, as the routing rule's JVM expression would compute it (null = bad row)."""
    if routing.kind == "column":
        assert routing.column is not None
        return pc.cast(frame.column(routing.column), pa.string())
    assert routing.template is not None
    parts: list[Any] = []
    for literal, name, _spec, _conv in string.Formatter().parse(routing.template):
        if literal:
            parts.append(literal)
        if name is not None:
            parts.append(pc.cast(frame.column(name), pa.string()))
    if len(parts) == 1 and isinstance(parts[0], pa.Array):
        return parts[0]
    return pc.binary_join_element_wise(*parts, "")


def _frames(
    batches: Iterator[pa.RecordBatch], schema: StructType, opts: WriteOptions
) -> Iterator[pa.RecordBatch]:
    keep = opts.routing.source_columns()
    exclude = opts.routing.body_exclusions()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        frame = opts.encoder.encode_arrow(batch, schema=schema, keep=keep, exclude=exclude, errors="column")
        if opts.routing.routed:
            frame = frame.append_column(STREAM_COLUMN, _targets(frame, opts.routing))
        yield frame


def _plan(cfg: S2Config, opts: WriteOptions, batch_id: int) -> WritePlan:
    routed = opts.routing.routed
    return WritePlan(
        cfg=cfg,
        batch_id=batch_id,
        stream=None if routed else opts.routing.stream,
        stream_column=STREAM_COLUMN if routed else None,
        on_error=opts.on_error,
        dlq_stream=opts.dlq_stream,
    )


def _write(
    cfg: S2Config, opts: WriteOptions, schema: StructType, batch_id: int, batches: Iterator[pa.RecordBatch]
) -> S2CommitMessage:
    started = time.monotonic()
    result = write_partition(_plan(cfg, opts, batch_id), _frames(batches, schema, opts))
    return S2CommitMessage(result.to_pylist(), time.monotonic() - started)


def _metrics(batch_id: int, messages: list[WriterCommitMessage | None]) -> BatchMetrics:
    rows: list[dict[str, Any]] = []
    duration = 0.0
    for message in messages:
        if isinstance(message, S2CommitMessage):
            rows.extend(message.rows)
            duration = max(duration, message.duration_s)
    return aggregate(batch_id, rows, duration, delivery="at-least-once")


class S2BatchWriter(DataSourceArrowWriter):
    """``df.write.format("s2")``: every partition appended by its task; the driver logs the totals."""

    def __init__(self, cfg: S2Config, opts: WriteOptions, schema: StructType) -> None:
        self._cfg = cfg
        self._opts = opts
        self._schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> S2CommitMessage:
        return _write(self._cfg, self._opts, self._schema, 0, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("%s", _metrics(0, messages).log_line())

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = sum(1 for m in messages if m is not None)
        log.warning(
            "s2 write aborted: records appended by the %d tasks that finished stay in S2 (appends are final)",
            done,
        )


class S2StreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("s2")``: each micro-batch appended by its tasks, at-least-once."""

    def __init__(self, cfg: S2Config, opts: WriteOptions, schema: StructType) -> None:
        self._cfg = cfg
        self._opts = opts
        self._schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> S2CommitMessage:
        tc = TaskContext.get()
        raw = tc.getLocalProperty(_BATCH_ID_PROPERTY) if tc is not None else None
        batch_id = int(raw) if raw is not None else 0
        return _write(self._cfg, self._opts, self._schema, batch_id, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("%s", _metrics(batchId, messages).log_line())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        done = sum(1 for m in messages if m is not None)
        log.warning(
            "s2 batch=%s aborted: records appended by the %d tasks that finished stay in S2; the batch is "
            "retried by Spark (at-least-once)",
            batchId,
            done,
        )
