"""``df.write.format("s2")`` and ``df.writeStream.format("s2")``: executors append through the writer core.

Spark unpickles the writer in the planning and commit processes too, so the task path (S2 SDK, h2,
protobuf) and the ledger are imported where used: a ``df.write`` commit imports neither, and protobuf adds
no importer that PySpark's per-call ``importlib.invalidate_caches()`` re-reads (`benchmarks._worker_probe`).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from s2_sink._exactly_once.identity import QUERY_ID_PROPERTY, query_id_from_checkpoint
from s2_sink._write.driver.metrics import BatchMetrics, aggregate
from s2_sink.datasource._compat import StreamArrowWriterBase
from s2_sink.datasource._write_keys import OPT_DELIVERY, OPT_WRITER_ID
from s2_sink.datasource._write_options import WriteOptions
from s2_sink.errors import CommitError, ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

    from s2_sink._exactly_once.sink_run import SinkRun
    from s2_sink._write.write_plan import WritePlan

__all__ = ["S2BatchWriter", "S2StreamWriter", "check_overwrite", "sink_identity", "warn_if_fragmented"]

log = logging.getLogger(__name__)

_BATCH_ID_PROPERTY = "streaming.sql.batchId"
# A batch in more than this many partitions per core, under this many bytes each, pays each Python task's
# fixed start-up cost many times over for its data.
_PARTITIONS_PER_CORE = 4
_SMALL_PARTITION_BYTES = 1024 * 1024
_warned: set[str | None] = set()  # writer ids this process warned about a fragmented batch


def warn_if_fragmented(writer_id: str | None, partitions: int, metrics: BatchMetrics) -> bool:
    """Warn once per query when a batch comes in far more partitions than its size warrants: a Python data
    source cannot change its input's partitioning, the user can."""
    cores = os.cpu_count() or 1
    if writer_id in _warned or partitions <= _PARTITIONS_PER_CORE * cores:
        return False
    if metrics.bytes >= partitions * _SMALL_PARTITION_BYTES:
        return False
    _warned.add(writer_id)
    log.warning(
        "format('s2'): micro-batch %s arrived in %d partitions for %d records (%d bytes): each partition is "
        "one Python write task with a fixed cost, and a Python data source cannot change its input's "
        "partitioning. Narrow the frame before writing: df.coalesce(n).writeStream.format('s2') with n "
        "about the number of cores, or write with foreachBatch(S2Writer(...)), which sizes its tasks itself",
        metrics.batch_id,
        partitions,
        metrics.records,
        metrics.bytes,
    )
    return True


@dataclass
class S2CommitMessage(WriterCommitMessage):
    """One task's result rows, wall time and, exactly-once, its execution and the query id it saw."""

    rows: list[dict[str, Any]]
    duration_s: float
    run: SinkRun | None = None
    query_id: str | None = None


def check_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise ConfigError(
            "format('s2') only appends: S2 streams cannot be overwritten; use mode('append') "
            "(or outputMode('append'/'update') for streaming)"
        )


def _write(
    plan: WritePlan,
    opts: WriteOptions,
    schema: StructType,
    batches: Iterator[pa.RecordBatch],
    run: SinkRun | None,
    *,
    query_id: str | None = None,
) -> S2CommitMessage:
    from s2_sink._write.task.partition_writer import write_partition  # noqa: PLC0415 - task side only (module doc)

    started = time.monotonic()
    result = write_partition(plan, opts.encoding(schema).frames(batches))
    return S2CommitMessage(result.to_pylist(), time.monotonic() - started, run, query_id)


def _metrics(batch_id: int, messages: list[WriterCommitMessage | None], delivery: str) -> BatchMetrics:
    rows: list[dict[str, Any]] = []
    duration = 0.0
    for message in messages:
        if isinstance(message, S2CommitMessage):
            rows.extend(message.rows)
            duration = max(duration, message.duration_s)
    return aggregate(batch_id, rows, duration, delivery=delivery)


def sink_identity(opts: WriteOptions, checkpoint_location: str | None) -> tuple[str, str | None]:
    """``(writer_id, query_id)`` of an exactly-once streaming write: ``s2.writer-id``, else the query id
    from the checkpoint's ``metadata`` (local or DBFS); the query id is returned with an explicit writer id
    too, so the ledger tells a reset checkpoint from a replay."""
    query_id = query_id_from_checkpoint(checkpoint_location) if checkpoint_location else None
    if opts.spec.writer_id is not None:  # validated with the options
        return opts.spec.writer_id, query_id
    if query_id is None:
        where = (
            f"checkpointLocation {checkpoint_location!r} is not readable from the driver's Python"
            if checkpoint_location
            else "no checkpointLocation option was given to this writer"
        )
        raise ConfigError(
            f"option {OPT_DELIVERY}=exactly-once (the default of writeStream.format('s2')) needs a stable "
            f"writer identity: set option {OPT_WRITER_ID} to a name unique to this query and kept across "
            f"restarts. By default it is the streaming query id, read from the checkpoint, but {where}. "
            f"Or set {OPT_DELIVERY}=at-least-once"
        )
    return query_id, query_id


class S2BatchWriter(DataSourceArrowWriter):
    """``df.write.format("s2")``: every partition appended by its task; the driver logs the totals."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        self._opts = opts
        self._schema = schema

    def write(self, iterator: Iterator[pa.RecordBatch]) -> S2CommitMessage:
        return _write(self._opts.spec.plan(0), self._opts, self._schema, iterator, None)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("%s", _metrics(0, messages, "at-least-once").log_line())

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_abort("s2 write", messages, "appends are final")


class S2StreamWriter(StreamArrowWriterBase):
    """``df.writeStream.format("s2")``; `identity` is `sink_identity`'s, None for at-least-once."""

    def __init__(
        self, opts: WriteOptions, schema: StructType, identity: tuple[str, str | None] | None
    ) -> None:
        self._opts = opts
        self._schema = schema
        self._identity = identity
        self._run: SinkRun | None = None

    @property
    def _delivery(self) -> str:
        return "at-least-once" if self._identity is None else "exactly-once"

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the writer on the driver once per micro-batch execution, to ship it to the tasks,
        # before any of them runs: the only driver step of a Python streaming sink that precedes the
        # writes. Exactly-once plans the execution here (an intent in this process's epoch, or a new
        # epoch); commit() runs on a writer Spark creates anew, which is never pickled and so plans none.
        # Spark pickles one writer twice (the write function's closure, then the writer): planned once.
        if self._identity is not None and self._run is None:
            from s2_sink._exactly_once.sink_run import open_sink_run  # noqa: PLC0415 - module doc

            writer_id, query_id = self._identity
            spec = self._opts.spec
            self._run = open_sink_run(
                spec.cfg,
                writer_id,
                query_id,
                spec.static_streams(),
                trust_partitioning=spec.trust_partitioning,
                shape=spec.shape(self._opts.encoder),
            )
        return dict(self.__dict__)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> S2CommitMessage:
        tc = TaskContext.get()
        raw = tc.getLocalProperty(_BATCH_ID_PROPERTY) if tc is not None else None
        batch_id = int(raw) if raw is not None else 0
        if self._identity is None:
            return _write(self._opts.spec.plan(batch_id), self._opts, self._schema, iterator, None)
        if self._run is None:
            # Never silently at-least-once: this Spark shipped the writer without pickling it on the driver.
            raise CommitError(
                "exactly-once: the writer reached the task without an opened epoch (this Spark version ships "
                f"the streaming writer differently); set {OPT_DELIVERY}=at-least-once, or write with "
                "foreachBatch(S2Writer(...))"
            )
        if raw is None:
            raise CommitError(
                f"exactly-once: the task has no micro-batch id (task property {_BATCH_ID_PROPERTY!r}); "
                f"this Spark cannot run format('s2') exactly-once: set {OPT_DELIVERY}=at-least-once"
            )
        query_id = tc.getLocalProperty(QUERY_ID_PROPERTY) if tc is not None else None
        epoch = self._run.plan_batch(batch_id, query_id)
        if epoch is None:
            for _ in iterator:  # the ledger has this batch: consume the input, write nothing
                pass
            return S2CommitMessage([], 0.0, self._run, query_id)
        plan = self._opts.spec.plan(batch_id, epoch)
        return _write(plan, self._opts, self._schema, iterator, self._run, query_id=query_id)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        metrics = _metrics(batchId, messages, self._delivery)
        warn_if_fragmented(self._identity[0] if self._identity else None, len(messages), metrics)
        if self._identity is not None:
            runs = [m.run for m in messages if isinstance(m, S2CommitMessage) and m.run is not None]
            executions = {r.run for r in runs}
            if len(executions) > 1:
                raise CommitError(
                    f"exactly-once: the tasks of batch {batchId} report executions {sorted(executions)}"
                )
            run = runs[0] if runs else None
            seen = {m.query_id for m in messages if isinstance(m, S2CommitMessage) and m.query_id}
            from s2_sink._exactly_once.sink_run import commit_sink_run  # noqa: PLC0415 - module doc

            commit_sink_run(
                self._opts.spec.cfg,
                self._identity[0],
                run,
                batchId,
                metrics.end_positions(),
                query_id=min(seen) if len(seen) == 1 else None,
                shape=self._opts.spec.shape(self._opts.encoder),
            )
        log.info("%s", metrics.log_line())

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        eo = self._identity is not None
        then = "the replay subtracts them (exactly-once)" if eo else "Spark retries the batch (at-least-once)"
        _log_abort(f"s2 batch={batchId}", messages, then)


def _log_abort(what: str, messages: list[WriterCommitMessage | None], then: str) -> None:
    done = sum(1 for m in messages if m is not None)
    log.warning("%s aborted: records appended by the %d tasks that finished stay in S2; %s", what, done, then)
