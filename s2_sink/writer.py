"""`S2Writer`: the ``foreachBatch`` sink that appends each micro-batch to S2, partition-parallel.

Per micro-batch the driver selects the columns the encoder reads, has the delivery mode make a `WritePlan`,
writes a small batch from the driver and any other in one ``mapInArrow`` job that encodes where the rows
are (as ``format("s2")`` does), then commits. docs/architecture.md follows it step by step.

The writer is a plain picklable object: under Spark Connect ``foreachBatch`` pickles it to the
server's Python worker, so ``last_metrics``/``history`` live there (use ``on_metrics`` or the log).
"""

from __future__ import annotations

import collections
import logging
import re
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql.types import DataType, StringType, StructField, StructType

from s2_sink._exactly_once.identity import session_facts
from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._option_map import WriteParallelism, parse_write_parallelism
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.preflight import preflight_write
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.batch_layout import laid_out
from s2_sink._write.driver.delivery import AtLeastOnce, BatchJob, DeliveryMode, ExactlyOnce
from s2_sink._write.driver.driver_write import collect_arrow, is_small, probe_small, write_on_driver
from s2_sink._write.driver.metrics import BatchMetrics, aggregate
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.driver.sizing import (
    StreamSplit,
    frame_shape,
    narrow,
    size_estimate,
    split_tasks,
    write_tasks,
)
from s2_sink._write.frame_encoding import FrameEncoding
from s2_sink._write.spec import KEYWORDS, Delivery, WriteSpec
from s2_sink._write.task.partition_writer import map_partition
from s2_sink._write.task.results import RESULT_DDL
from s2_sink._write.write_plan import OnError
from s2_sink.config import S2Config
from s2_sink.encoders._arrow_types import check_json_type
from s2_sink.encoders._change_order import col
from s2_sink.encoders._frame import BODY, KEY
from s2_sink.errors import CommitError, ConfigError, EncodeError, FencedError, S2SinkError, WriteError

if TYPE_CHECKING:
    from s2_sink._write.driver.sizing import FrameShape
    from s2_sink.encoders import Encoder

__all__ = ["Delivery", "S2Writer"]

log = logging.getLogger(__name__)

_MEMOS = 8
"""Schemas whose column selection a writer keeps (a query's batches share one)."""


class S2Writer:
    """``foreachBatch`` sink appending each micro-batch to S2. A picklable callable ``(batch_df, batch_id)``.

    Example::

        cfg = S2Config(basin="my-basin", stream="events", access_token=token)
        query = df.writeStream.foreachBatch(S2Writer(cfg, delivery="at-least-once")).start()

    Args:
        cfg: where and how to append (validated already).
        encoder: turns rows into records (``InsertEncoder``/``UpsertEncoder``); default ``InsertEncoder()``
            (JSON rows). A batch that already is a record frame (has ``_s2_body``) may pass
            ``encoder=None`` and is written as is.
        stream_column: route each row to the stream named by this column, or by a template over
            columns such as ``"events/{region}"``. Default: every row to ``cfg.stream``.
        shards: route by a stable hash of the record key to ``{cfg.stream}/0`` .. ``/{shards-1}``.
        partition_by_key: repartition the batch by (target stream, key) first, so each key is written
            by one task: a key's changes keep their input order within each input partition, but
            changes of one key from several input partitions arrive in no fixed order (give the encoder
            an ``order_by`` for that). Implied by an encoder with ``order_by``.
        on_error: bad rows (cannot be encoded, null target, over 1 MiB): ``"fail"`` the batch (default),
            ``"skip"`` them (counted) or send them to ``dlq_stream`` (``"dlq"``, counted).
        dlq_stream: the dead-letter stream for ``on_error="dlq"``.
        delivery: ``"exactly-once"`` (default) or ``"at-least-once"``.
        writer_id: identity of an exactly-once writer (default: the streaming query id). Tells a query's
            writers apart: several S2Writers in one ``foreachBatch`` need one each. Configuration is not
            part of it, so a restart with changed settings goes on from the same ledger.
        on_metrics: called with each batch's `BatchMetrics` after it is written.
        create_streams: create missing target streams; default ``cfg.create_streams``.
        history_size: how many `BatchMetrics` ``history`` keeps.
        preflight: before the first batch's tasks launch, check on the driver that the endpoint answers, the
            token is accepted and the basin and known target streams exist or will be created (once per
            writer object; `PreflightError` naming the endpoint, basin, stream and fix). Default ``True``.
        write_parallelism: how many tasks write a micro-batch: ``"auto"`` sizes it to the batch (about
            one to two per core; Spark's partitions are narrowed with ``coalesce``, no shuffle), a
            positive number caps it at that (a by-key layout gets exactly that many). Default
            ``cfg.write_parallelism`` (option ``sink.write-parallelism``, ``"auto"``). Small batches
            (``cfg.driver_write_max_rows``/``max_bytes``) are written from the driver process instead.
    """

    def __init__(
        self,
        cfg: S2Config,
        encoder: Encoder | None = None,
        *,
        stream_column: str | None = None,
        shards: int | None = None,
        partition_by_key: bool = False,
        on_error: OnError = "fail",
        dlq_stream: str | None = None,
        delivery: Delivery = "exactly-once",
        writer_id: str | None = None,
        on_metrics: Callable[[BatchMetrics], Any] | None = None,
        create_streams: bool | None = None,
        history_size: int = 100,
        preflight: bool = True,
        write_parallelism: WriteParallelism | None = None,
    ) -> None:
        if not isinstance(cfg, S2Config):
            raise ConfigError(f"cfg must be an S2Config, got {type(cfg).__name__}")
        if create_streams is not None:
            if not isinstance(create_streams, bool):
                raise ConfigError(f"create_streams must be a bool, got {create_streams!r}")
            cfg = cfg.replace(create_streams=create_streams)
        if not isinstance(partition_by_key, bool):
            raise ConfigError(f"partition_by_key must be a bool, got {partition_by_key!r}")
        if on_metrics is not None and not callable(on_metrics):
            raise ConfigError(f"on_metrics must be callable, got {on_metrics!r}")
        if isinstance(history_size, bool) or not isinstance(history_size, int) or history_size < 1:
            raise ConfigError(f"history_size must be a positive integer, got {history_size!r}")
        if not isinstance(preflight, bool):
            raise ConfigError(f"preflight must be a bool, got {preflight!r}")
        self._preflight_pending = preflight
        self.write_parallelism: WriteParallelism = parse_write_parallelism(
            "write_parallelism", cfg.write_parallelism if write_parallelism is None else write_parallelism
        )
        self.spec = WriteSpec.build(
            cfg,
            Routing.build(stream=cfg.stream, stream_column=stream_column, shards=shards),
            on_error=on_error,
            dlq_stream=dlq_stream,
            delivery=delivery,
            writer_id=writer_id,
            dlq_payload=True,
            spelling=KEYWORDS,
        )
        _check_change_order(encoder, self.spec)
        self.encoder = encoder
        self.partition_by_key = partition_by_key
        self.on_metrics = on_metrics
        # Ledger, fencing, chunk tags and retry/replay subtraction: see docs/exactly-once.md.
        self.mode: DeliveryMode = (
            ExactlyOnce(self.spec, self.spec.shape(encoder))
            if self.spec.exactly_once
            else AtLeastOnce(self.spec)
        )
        self.history: collections.deque[BatchMetrics] = collections.deque(maxlen=history_size)
        self.last_metrics: BatchMetrics | None = None
        self._memos: dict[str, _RowsMemo] = {}
        self._split = StreamSplit(self.cfg.max_inflight_bytes)  # routed batches: narrowed or by stream
        self._streams_found: frozenset[str] = frozenset()  # `WritePlan.streams_found` (`_found_streams`)
        self._likely_big: bool | None = None
        """Whether the last batch written was over the driver-write limits (the next one then skips the
        probe); None before the first."""

    def __getstate__(self) -> dict[str, Any]:
        # Spark columns are handles on the session that built them: a pickled copy builds its own.
        return {**self.__dict__, "_memos": {}}

    @property
    def cfg(self) -> S2Config:
        return self.spec.cfg

    @property
    def routing(self) -> Routing:
        return self.spec.routing

    @property
    def on_error(self) -> OnError:
        return self.spec.on_error

    @property
    def dlq_stream(self) -> str | None:
        return self.spec.dlq_stream

    @property
    def delivery(self) -> Delivery:
        return self.spec.delivery

    @property
    def writer_id(self) -> str | None:
        return self.spec.writer_id

    def __repr__(self) -> str:
        return (
            f"S2Writer(cfg={self.cfg!r}, encoder={self.encoder!r}, routing={self.routing!r}, "
            f"on_error={self.on_error!r}, dlq_stream={self.dlq_stream!r}, delivery={self.delivery!r})"
        )

    # -- driver side -----------------------------------------------------------------------------------

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        """Write one micro-batch (the ``foreachBatch`` entry point)."""
        started = time.monotonic()
        if self._preflight_pending:  # once per writer object, before the first batch's tasks
            preflight_write(self.cfg, self.spec.streams_to_create(), what="S2Writer")
            self._preflight_pending = False
        rows_df, encoding = self.rows(batch_df)
        # The optimizer's estimate costs a planning pass: asked before the probe only when no earlier batch
        # says whether the batches run small, else only to size a write stage.
        estimated = self._likely_big is not False
        size = size_estimate(rows_df) if estimated else None
        likely_big = bool(self._likely_big)
        with probe_small(rows_df, self.cfg, size, likely_big=likely_big) as small:
            if small is None and not estimated:
                size = size_estimate(rows_df)
            shape = None if small is not None else frame_shape(rows_df, size)
            tasks = 1 if shape is None else write_tasks(shape, self.write_parallelism)
            session = session_facts(rows_df.sparkSession) if self.spec.exactly_once else None
            job = self.mode.prepare(batch_id, session)
            if job is None:  # the ledger has this batch (logged there)
                self.last_metrics = BatchMetrics.skipped_replay(batch_id, delivery=self.mode.name)
                return
            self._create_known_streams()
            job = self._with_streams_found(job)
            try:
                if small is not None:
                    rows = write_on_driver(job, encoding, small)
                else:
                    assert shape is not None
                    rows = self._write_in_tasks(job, rows_df, encoding, shape, tasks)
            except S2SinkError:
                raise
            except Exception as exc:
                raise _translate(exc) from exc
        path = "tasks" if small is None else "driver"
        metrics = aggregate(batch_id, rows, time.monotonic() - started, delivery=self.mode.name, path=path)
        self._found_streams(rows)
        # The next batch is probed unless this one was too big for the driver (see driver_write).
        self._likely_big = small is None and not is_small(metrics.rows_in, metrics.bytes, self.cfg)
        self.mode.commit(job, metrics)
        self._publish(metrics)

    def _write_in_tasks(
        self, job: BatchJob, rows_df: DataFrame, encoding: FrameEncoding, shape: FrameShape, tasks: int
    ) -> list[dict[str, Any]]:
        """The batch written by `tasks` Spark tasks, each encoding and appending its rows; the result rows.

        One ``mapInArrow`` stage does both unless the batch needs a layout first (`laid_out`): a replay's
        by record content, an ordered changelog's by (stream, key), a compaction across the batch."""
        encoder = encoding.encoder
        by_key = self.partition_by_key or bool(encoder is not None and encoder.change_order)
        if not (job.recovery_layout or by_key or getattr(encoder, "compact", False)):
            by_stream = self.routing.kind in ("column", "template") and self._split.next_by_stream()
            if by_stream:
                split = self._split.split(rows_df, shape, self.write_parallelism)
                write = self._split.writes(map_partition(self._split.tasks_plan(job.plan), encoding))
            else:
                split, write = narrow(rows_df, shape, tasks), map_partition(job.plan, encoding)
            rows = _collect(split.mapInArrow(write, RESULT_DDL))
            self._split.observe(rows, sum(r["rows_in"] for r in rows), by_stream=by_stream)
            return rows
        if job.recovery_layout:
            layout = RecoveryLayout.of(rows_df.sparkSession, tasks, routed=self.routing.routed)
            encoding, job = encoding.laid_out(layout), job.laid_out(layout)
        elif by_key:  # hashed by key, many keys spread evenly: a second wave only repeats the task floor
            tasks = split_tasks(shape, self.write_parallelism)
        laid = laid_out(rows_df, encoding, tasks=tasks, by_key=by_key, shape=shape)
        return _collect(laid.frame.mapInArrow(laid.writes(job.plan), RESULT_DDL))

    def rows(self, batch_df: DataFrame) -> tuple[DataFrame, FrameEncoding]:
        """The rows the tasks are handed for `batch_df` (the columns the encoder reads, and the target
        stream) and how they encode them; built once per schema, as in classic Spark each column built
        from Python is a round trip to the JVM."""
        schema: StructType = batch_df.schema
        key = schema.json()
        memo = self._memos.get(key)
        if memo is None:
            memo = self._build_rows(batch_df, schema)
            if len(self._memos) >= _MEMOS:
                self._memos.clear()
            self._memos[key] = memo
        return memo.apply(batch_df), memo.encoding

    def _build_rows(self, batch_df: DataFrame, schema: StructType) -> _RowsMemo:
        self.routing.validate(schema)
        names = schema.fieldNames()
        encoder = self.encoder
        if encoder is None and BODY not in names:
            encoder = _default_encoder()
        exclude = self.routing.body_exclusions()
        order = encoder.change_order if encoder is not None else ()
        if encoder is not None:
            encoder.validate(schema, keep=[*self.routing.source_columns(), *order], exclude=exclude)
            read = encoder.input_columns(schema, exclude)
        else:
            read = list(names)
        shipped = [c for c in names if c in {*read, *order}]
        if self.on_error == "dlq":  # a dead letter's body is the whole input row, as JSON
            shipped = [c for c in names if c in shipped or _json_typed(schema[c].dataType)]
        _check_case_clashes(batch_df, schema, shipped)
        columns = [col(c) for c in shipped]
        if self.routing.routed and self.routing.kind != "shards":  # Spark's text of any column type
            columns.append(self.routing.expr(KEY, BODY).alias(STREAM_COLUMN))
        fields = [schema[c] for c in shipped]
        if len(columns) > len(shipped):
            fields.append(StructField(STREAM_COLUMN, StringType()))
        whole = [f.name for f in fields] == names  # every column, in order: no select needed
        encoding = FrameEncoding(
            encoder,
            StructType(fields),
            self.routing,
            keep=order,
            payload=self.on_error == "dlq",
            arranged=False,
        )
        return _RowsMemo(None if whole else columns, encoding)

    def _create_known_streams(self) -> None:
        if not self.cfg.create_streams:
            return
        streams = self.spec.streams_to_create()
        if streams:
            _runtime.run(_ensure_streams(self.cfg, streams))

    def _with_streams_found(self, job: BatchJob) -> BatchJob:
        """`job` with the streams the last batch appended to, which its tasks need not create."""
        if not self._streams_found:
            return job
        return replace(job, plan=replace(job.plan, streams_found=self._streams_found))

    def _found_streams(self, rows: list[dict[str, Any]]) -> None:
        """With ``create_streams``, remember the streams a batch's result rows show records appended to."""
        if self.cfg.create_streams:
            self._streams_found = frozenset(r["stream"] for r in rows if r["stream"] and r["records"])

    def _publish(self, metrics: BatchMetrics) -> None:
        self.last_metrics = metrics
        self.history.append(metrics)
        log.info("%s", metrics.log_line())
        if self.on_metrics is not None:
            self.on_metrics(metrics)


class _RowsMemo(NamedTuple):
    """How `S2Writer.rows` selects and encodes every batch of one schema."""

    columns: list[Column] | None
    """The select that makes the rows shipped to the tasks; None: the batch as it is."""
    encoding: FrameEncoding

    def apply(self, batch_df: DataFrame) -> DataFrame:
        return batch_df if self.columns is None else batch_df.select(*self.columns)


def _collect(results: DataFrame) -> list[dict[str, Any]]:
    # As Arrow: a routed batch has a result row per (task, stream), which Row pickling costs both sides.
    rows: list[dict[str, Any]] = collect_arrow(results).to_pylist()
    return rows


def _json_typed(dtype: DataType) -> bool:
    """Whether a column of `dtype` has a JSON mapping (a dead letter's payload leaves the others out)."""
    try:
        check_json_type(dtype, "payload")
    except ConfigError:
        return False
    return True


def _check_case_clashes(df: DataFrame, schema: StructType, selected: list[str]) -> None:
    """ConfigError for a selected column whose name differs only in case from another's: Spark resolves it
    as ambiguous unless ``spark.sql.caseSensitive`` is on (the session is asked only when there is one)."""
    first: dict[str, str] = {}
    for name in schema.fieldNames():
        first.setdefault(name.lower(), name)
    picked = set(selected)
    clashes = [(first[n.lower()], n) for n in schema.fieldNames() if first[n.lower()] != n]
    clashes = [(a, b) for a, b in clashes if a in picked or b in picked]
    if not clashes or str(df.sparkSession.conf.get("spark.sql.caseSensitive", "false")).lower() == "true":
        return
    pairs = ", ".join(f"{a!r} and {b!r}" for a, b in clashes)
    raise ConfigError(
        f"columns {pairs} differ only in case: Spark resolves them as one ambiguous column while "
        "spark.sql.caseSensitive is false; rename one of them (or set spark.sql.caseSensitive=true)"
    )


async def _ensure_streams(cfg: S2Config, streams: list[str]) -> None:
    await get_pool().ensure_streams(cfg, streams)


def _check_change_order(encoder: Encoder | None, spec: WriteSpec) -> None:
    """Exactly-once replays must write the same records: refuse a compaction whose survivor depends on how
    the input was split (without ``order_by``, "last" is the input order)."""
    if encoder is None or not spec.exactly_once or not getattr(encoder, "compact", False):
        return
    if not encoder.change_order:
        raise ConfigError(
            f"{type(encoder).__name__}(compact=True) without order_by keeps the last change per key in "
            "input order, which depends on how Spark split the micro-batch, so a replay under "
            "delivery='exactly-once' could keep a different change: pass order_by=<the change-order "
            "column> (a commit version, an offset, a log position), or drop compact, or use "
            "delivery='at-least-once'"
        )


def _default_encoder() -> Encoder:
    from s2_sink.encoders import InsertEncoder  # noqa: PLC0415 - encoders import Spark helpers lazily

    return InsertEncoder()


_ERROR_CLASSES: dict[str, type[S2SinkError]] = {
    "FencedError": FencedError,
    "WriteError": WriteError,
    "EncodeError": EncodeError,
    "CommitError": CommitError,
    "ConfigError": ConfigError,
}
_ERROR_RE = re.compile(
    r"(?:s2_sink\.errors\.)?\b(FencedError|WriteError|EncodeError|CommitError|ConfigError): ([^\n]+)"
)


def _translate(exc: Exception) -> Exception:
    """Turn a Spark job failure caused by one of our executor-side errors back into that error type."""
    match = _ERROR_RE.search(str(exc))
    if match is None:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return WriteError(f"the write job failed: {type(exc).__name__}: {first_line}")
    return _ERROR_CLASSES[match.group(1)](match.group(2).strip())
