"""`S2Writer`: the ``foreachBatch`` sink that appends each micro-batch to S2, partition-parallel.

Per micro-batch, on the driver:

1. the encoder projects the batch into the record frame (JVM-side, Spark Connect compatible), the
   routing rule adds the target-stream column, and ``on_error="dlq"`` adds the original payload of
   rows that cannot be encoded;
2. the delivery mode turns the batch into a `WritePlan` from the session's facts alone (exactly-once adds
   fencing, chunk tags and a recovery hook, and may skip a batch or ask for a replay's recovery layout,
   which the writer applies to the frame: `repartition_for_recovery`);
3. a small batch (``sink.driver-write.*``) is collected as Arrow and written from the driver process as
   one partition (`s2_sink._write.driver.driver_write`); any other is narrowed to the number of write
   tasks the batch warrants (`s2_sink._write.driver.sizing`) and one ``mapInArrow`` job appends every
   partition through the executors' pooled sessions and returns small result rows;
4. the delivery mode commits, and the metrics are aggregated, kept, logged and passed to ``on_metrics``.

The writer is a plain picklable object: under Spark Connect ``foreachBatch`` pickles it to the
server's Python worker, so ``last_metrics``/``history`` live there (use ``on_metrics`` or the log).
"""

from __future__ import annotations

import collections
import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from s2_sink._exactly_once.identity import session_facts
from s2_sink._exactly_once.recovery_layout import repartition_for_recovery
from s2_sink._option_map import WriteParallelism, parse_write_parallelism
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.preflight import preflight_write
from s2_sink._transport.session_pool import get_pool
from s2_sink._write.driver.delivery import AtLeastOnce, BatchJob, DeliveryMode
from s2_sink._write.driver.driver_write import is_small, probe_small, write_on_driver
from s2_sink._write.driver.exactly_once import ExactlyOnce
from s2_sink._write.driver.metrics import BatchMetrics, aggregate
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.driver.sizing import FrameShape, frame_shape, narrow, size_estimate, write_tasks
from s2_sink._write.plan import OnError
from s2_sink._write.spec import KEYWORDS, PAYLOAD_COLUMN, Delivery, WriteSpec
from s2_sink._write.task.partition_writer import map_partition
from s2_sink._write.task.results import RESULT_DDL
from s2_sink.config import S2Config
from s2_sink.encoders import _jvm
from s2_sink.encoders._base import FrameRecipe
from s2_sink.encoders._change_order import ORDER, order_struct, sort_changes
from s2_sink.encoders._frame import ACTION, BODY, ERROR, HEADERS, KEY, TIMESTAMP, TYPE_DDL
from s2_sink.errors import CommitError, ConfigError, EncodeError, FencedError, S2SinkError, WriteError

if TYPE_CHECKING:
    from s2_sink.encoders import Encoder

__all__ = ["Delivery", "S2Writer"]

log = logging.getLogger(__name__)

_FRAME_TYPES = {col: ddl for col, ddl in TYPE_DDL.items() if col != BODY}
_FRAME_MEMOS = 8
"""Schemas whose frame projection a writer keeps (a query's batches share one)."""


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
        self._frames: dict[str, _FrameMemo] = {}
        self._likely_big: bool | None = None
        """Whether the last batch written was over the driver-write limits (the next one then skips the
        probe); None before the first."""

    def __getstate__(self) -> dict[str, Any]:
        # Spark columns are handles on the session that built them: a pickled copy builds its own.
        return {**self.__dict__, "_frames": {}}

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
        frame = self.frame(batch_df)
        # The optimizer's estimate costs a planning pass: asked before the probe only when no earlier batch
        # says whether the batches run small, else only to size a write stage.
        estimated = self._likely_big is not False
        size = size_estimate(frame) if estimated else None
        ordered = self.encoder is not None and bool(self.encoder.change_order)
        likely_big = bool(self._likely_big)
        with probe_small(frame, self.cfg, size, ordered=ordered, likely_big=likely_big) as (frame, small):
            if small is None and not estimated:
                size = size_estimate(frame)
            shape = None if small is not None else frame_shape(frame, size)
            tasks = 1 if shape is None else write_tasks(shape, self.write_parallelism)
            prepared = self._prepare(batch_id, frame, tasks)
            if prepared is None:  # the ledger has this batch (logged there)
                self.last_metrics = BatchMetrics.skipped_replay(batch_id, delivery=self.mode.name)
                return
            job, to_write = prepared
            self._create_known_streams()
            try:
                if small is not None:
                    rows = write_on_driver(job, to_write, small)
                else:
                    assert shape is not None
                    rows = [
                        r.asDict()
                        for r in self._laid_out(job, to_write, shape, tasks)
                        .mapInArrow(map_partition(job.plan), RESULT_DDL)
                        .collect()
                    ]
            except S2SinkError:
                raise
            except Exception as exc:
                raise _translate(exc) from exc
        path = "tasks" if small is None else "driver"
        metrics = aggregate(batch_id, rows, time.monotonic() - started, delivery=self.mode.name, path=path)
        # The next batch is probed unless this one was too big for the driver (see driver_write).
        self._likely_big = small is None and not is_small(metrics.rows_in, metrics.bytes, self.cfg)
        self.mode.commit(job, metrics)
        self._publish(metrics)

    def _prepare(self, batch_id: int, frame: DataFrame, tasks: int) -> tuple[BatchJob, DataFrame] | None:
        """The delivery mode's job for the batch and the frame to write it from (a replay's laid out by
        record content in `tasks` partitions), or None when the batch is not written again."""
        session = session_facts(frame.sparkSession) if self.spec.exactly_once else None
        job = self.mode.prepare(batch_id, session)
        if job is None:
            return None
        if job.recovery_layout:
            frame, layout = repartition_for_recovery(frame, tasks)
            job = job.laid_out(layout)
        return job, frame

    def _laid_out(self, job: BatchJob, frame: DataFrame, shape: FrameShape, tasks: int) -> DataFrame:
        """The job's frame in `tasks` write tasks: by (stream, key) for ordered upserts, else narrowed."""
        out = frame
        if not job.plan.fixed_layout:  # a replay's layout wins
            if self.partition_by_key or ORDER in out.columns:
                keys = [STREAM_COLUMN, KEY] if self.routing.routed else [KEY]
                out = out.repartition(tasks, *keys)
            else:
                out = narrow(out, shape, tasks)
        # Every change of a (stream, key) is in one task now: sort them into change order (a replay's
        # layout sorted them already and dropped the column).
        return sort_changes(out)

    def frame(self, batch_df: DataFrame) -> DataFrame:
        """The record frame to write for `batch_df`: frame columns, plus the target stream when routed
        and the original payload under ``on_error="dlq"``. Validates the schema (ConfigError).

        Built once per schema (`_FrameMemo`): a micro-batch of a schema seen before is projected with the
        column expressions built for it, the same expressions by name, validated then."""
        schema: StructType = batch_df.schema
        key = schema.json()
        memo = self._frames.get(key)
        if memo is not None:
            return memo.apply(batch_df)
        frame, memo = self._build_frame(batch_df, schema)
        if memo is not None:
            if len(self._frames) >= _FRAME_MEMOS:
                self._frames.clear()
            self._frames[key] = memo
        return frame

    def _build_frame(self, batch_df: DataFrame, schema: StructType) -> tuple[DataFrame, _FrameMemo | None]:
        """`frame` built from scratch, and its memo when it can be replayed on other batches."""
        self.routing.validate(schema)
        names = schema.fieldNames()
        keep = list(self.routing.source_columns())
        if self.on_error == "dlq":
            keep += [c for c in names if c not in keep]
        order = self.encoder.change_order if self.encoder is not None else ()
        keep += [c for c in order if c not in keep]
        recipe: FrameRecipe | None = None
        frame: DataFrame | None
        if self.encoder is None and BODY in names:
            frame = batch_df
            for col, ddl in _FRAME_TYPES.items():
                if col not in names:
                    frame = frame.withColumn(col, F.lit(None).cast(ddl))
            with_headers = HEADERS in names
            columns = frame.columns
        else:
            encoder = self.encoder if self.encoder is not None else _default_encoder()
            # The upsert changelog ships flat (_s2_key, _s2_action): an array of header structs per row
            # costs the JVM (building it, converting it to Arrow) more than the key JSON itself.
            exclude = self.routing.body_exclusions()
            recipe = encoder.recipe(batch_df, keep=keep, exclude=exclude, flat_changelog=True)
            if recipe is not None:
                frame, columns = None, list(recipe.names)
            else:  # a compacting projection: built for each batch
                frame = encoder.project(batch_df, keep=keep, exclude=exclude, flat_changelog=True)
                columns = frame.columns
            with_headers = encoder.emits_headers
            if ACTION in columns:  # only the rows' own headers are left in _s2_headers
                with_headers = encoder.headers_column is not None
        # A frame without the headers column means "no headers" to the partition writer; shipping a null
        # array<struct> column through Arrow costs the JVM more than the body itself (~15 us of CPU per row).
        wanted = frame_columns(with_headers, ACTION in columns)
        cols = [F.col(c) for c in wanted]
        if self.routing.routed:
            cols.append(self.routing.expr(KEY, BODY).alias(STREAM_COLUMN))
        if order:
            cols.append(order_struct(order).alias(ORDER))
        if self.on_error == "dlq":
            row_json = F.to_json(F.struct(*[_jvm.col(c) for c in names])).cast("binary")
            cols.append(F.when(F.col(ERROR).isNotNull(), row_json).alias(PAYLOAD_COLUMN))
        if recipe is None:
            assert frame is not None
            return frame.select(*cols), None
        memo = _FrameMemo.of(recipe, cols, wanted)
        return memo.apply(batch_df), memo

    def _create_known_streams(self) -> None:
        if not self.cfg.create_streams:
            return
        streams = self.spec.streams_to_create()
        if streams:
            _runtime.run(_ensure_streams(self.cfg, streams))

    def _publish(self, metrics: BatchMetrics) -> None:
        self.last_metrics = metrics
        self.history.append(metrics)
        log.info("%s", metrics.log_line())
        if self.on_metrics is not None:
            self.on_metrics(metrics)


class _FrameMemo(NamedTuple):
    """How `S2Writer.frame` projects every batch of one schema: the encoder's recipe, then the writer's
    select (routing target, change order, dead-letter payload), all by column name."""

    recipe: FrameRecipe
    columns: list[Column] | None
    """None: the recipe's columns are the frame."""

    @classmethod
    def of(cls, recipe: FrameRecipe, columns: list[Column], wanted: tuple[str, ...]) -> _FrameMemo:
        """The memo of the encoder's `recipe` followed by the writer's `columns`, of which the first are
        the frame columns `wanted`: the recipe alone, narrowed to them, when they are all (each select
        costs Spark an analysis of the plan)."""
        if len(columns) > len(wanted):
            return cls(recipe, columns)
        picked = [(c, n) for c, n in zip(recipe.columns, recipe.names, strict=True) if n in wanted]
        return cls(FrameRecipe(recipe.where, [c for c, _ in picked], tuple(n for _, n in picked)), None)

    def apply(self, batch_df: DataFrame) -> DataFrame:
        frame = self.recipe.apply(batch_df)
        return frame if self.columns is None else frame.select(*self.columns)


def frame_columns(with_headers: bool, with_action: bool) -> tuple[str, ...]:
    """The record frame's own columns, in order, as the writer ships them."""
    return (
        BODY,
        *([HEADERS] if with_headers else []),
        TIMESTAMP,
        KEY,
        ERROR,
        *([ACTION] if with_action else []),
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
