"""``df.writeStream.format("s2")`` as Spark drives it, around the real streaming writer (`S2StreamWriter`).

Per micro-batch execution Spark creates the writer on the driver and pickles it for the tasks (its
``__getstate__`` plans the execution: `open_sink_run`), each task unpickles it and calls ``write`` with its
partition's Arrow batches and its `pyspark.TaskContext` (partition, attempt, task id, stage and the local
properties ``streaming.sql.batchId`` and ``sql.streaming.queryId``), and the driver calls ``commit`` (or
``abort``) on a writer it creates again, never pickled, with the tasks' messages. What is modelled here:

- the task context: pyspark's is a class attribute of a plain Python class, one per worker process (a
  Python worker runs one task at a time); the simulation runs tasks as threads of one process, so while a
  schedule runs, ``TaskContext.get()`` answers each thread its own context (`task_contexts`), with the
  fields Spark's worker sets;
- the encoder: the simulated batches are record frames already (what an encoder makes of the rows, as for
  ``foreachBatch``), so `RecordFrames.encode_frame` hands them on with the stream column kept for routing;
  the routing's own Arrow twin adds the target column, as for any ``format("s2")`` write.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import tempfile
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.types import StructType

from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import OPTIONS, WriteSpec
from s2_sink._write.write_plan import PartitionContext
from s2_sink.config import S2Config
from s2_sink.datasource._spark_writers import S2CommitMessage, S2StreamWriter, sink_identity
from s2_sink.datasource._write_options import WriteOptions
from s2_sink.encoders import Encoder
from s2_sink.encoders._frame import frame_arrow_schema
from tests.sim._scenario import DLQ_STREAM, Row, Scenario, frame_of

__all__ = ["SinkFront", "task_contexts"]

TARGET = "target"
"""The stream column of routed ``format("s2")`` writes (``s2.stream-column``)."""
_BATCH_ID_PROPERTY = "streaming.sql.batchId"
_QUERY_ID_PROPERTY = "sql.streaming.queryId"


class RecordFrames(Encoder):
    """The simulation's encoder: its input batches are record frames (see module docstring)."""

    def __init__(self) -> None:
        super().__init__(headers_column=None, timestamp_column=None, exclude_columns=())

    def encode_frame(
        self,
        batch: pa.RecordBatch,
        *,
        schema: StructType,
        keep: Sequence[str] = (),
        exclude: Sequence[str] = (),
        arranged: bool = True,
        flat_changelog: bool = False,
    ) -> pa.RecordBatch:
        del schema, exclude, arranged, flat_changelog
        n = batch.num_rows
        names = batch.schema.names
        frame = frame_arrow_schema()
        columns = [batch.column(f.name) if f.name in names else pa.nulls(n, f.type) for f in frame]
        kept = [c for c in keep if c in names]
        return pa.RecordBatch.from_arrays(
            [*columns, *(batch.column(c) for c in kept)],
            schema=frame_arrow_schema(pa.schema([batch.schema.field(c) for c in kept])),
        )


class _PerThread:
    """``TaskContext._taskContext`` answering each thread its own task's context (None elsewhere)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def __get__(self, obj: object, owner: type | None = None) -> TaskContext | None:
        return getattr(self.local, "context", None)


_per_thread = _PerThread()


@contextlib.contextmanager
def task_contexts() -> Iterator[None]:
    """While a schedule runs: ``TaskContext.get()`` per simulated task thread (see module docstring)."""
    saved = TaskContext.__dict__.get("_taskContext")
    TaskContext._taskContext = _per_thread  # type: ignore[assignment]  # a descriptor, read per thread
    try:
        yield
    finally:
        TaskContext._taskContext = saved


def _task_context(ctx: PartitionContext, query_id: str) -> TaskContext:
    """A task's context with the fields Spark's Python worker sets (not ``TaskContext()``, which would make
    itself the process's one context)."""
    tc: TaskContext = object.__new__(TaskContext)
    tc._partitionId = ctx.partition_id
    tc._attemptNumber = ctx.attempt_number
    tc._taskAttemptId = ctx.task_attempt_id
    tc._stageId = ctx.stage_id
    tc._localProperties = {_BATCH_ID_PROPERTY: str(ctx.batch_id), _QUERY_ID_PROPERTY: query_id}
    tc._cpus = 1
    tc._resources = {}
    return tc


_checkpoints = tempfile.TemporaryDirectory(prefix="sim-checkpoint-")


def _checkpoint(query_id: str) -> str:
    """A checkpoint location whose ``metadata`` names `query_id`, as Spark writes it at the first start."""
    path = os.path.join(_checkpoints.name, query_id)
    if not os.path.exists(path):
        os.makedirs(path)
        with open(os.path.join(path, "metadata"), "w", encoding="utf-8") as fh:
            fh.write(json.dumps({"id": query_id}) + "\n")
    return path


class SinkFront:
    """One query's ``format("s2")`` writer: its options as the data source validated them, its identity as
    `sink_identity` resolves it from the checkpoint."""

    def __init__(self, cfg: S2Config, sc: Scenario, query_id: str) -> None:
        self.sc = sc
        self.query_id = query_id
        # format("s2") has no shards: a sharded scenario's targets come in a stream column.
        routed = sc.routed
        spec = WriteSpec.build(
            cfg.replace(stream=None) if routed else cfg,
            Routing.build(
                stream=None if routed else cfg.stream, stream_column=TARGET if routed else None, shards=None
            ),
            on_error="dlq" if sc.dlq else "fail",
            dlq_stream=DLQ_STREAM if sc.dlq else None,
            delivery="exactly-once",
            spelling=OPTIONS,
        )
        self.opts = WriteOptions(encoder=RecordFrames(), spec=spec)
        self.schema = StructType()  # only the encoder reads it
        self.identity = sink_identity(self.opts, _checkpoint(query_id))
        self.routed = routed

    def writer(self) -> S2StreamWriter:
        """The writer Spark creates on the driver for one execution (or for its commit)."""
        return S2StreamWriter(self.opts, self.schema, self.identity)

    def ship(self) -> tuple[bytes, S2StreamWriter]:
        """Spark pickles a new writer for the tasks (which plans the execution); the bytes and the copy."""
        shipped = pickle.dumps(self.writer())
        copy: S2StreamWriter = pickle.loads(shipped)
        return shipped, copy

    def write(self, shipped: bytes, rows: list[Row], ctx: PartitionContext) -> S2CommitMessage:
        """One task: unpickle the writer, set the task's context, ``write`` its partition."""
        writer: S2StreamWriter = pickle.loads(shipped)
        frames = [frame_of(rows, routed=self.routed, dlq=self.sc.dlq, stream_column=TARGET)] if rows else []
        _per_thread.local.context = _task_context(ctx, self.query_id)
        try:
            return writer.write(iter(frames))
        finally:
            _per_thread.local.context = None

    def commit(self, batch: int, messages: Sequence[Any]) -> None:
        self.writer().commit(list(messages), batch)

    def abort(self, batch: int, messages: Sequence[Any]) -> None:
        self.writer().abort(list(messages), batch)
