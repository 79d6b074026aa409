"""Small micro-batches written from the driver process, skipping the per-task floor.

A Python write task costs ~150-400 ms before its first row; a 1k-row micro-batch costs ~10 ms to append.
So a batch of at most ``driver_write_max_rows`` rows and ``driver_write_max_bytes`` bytes of rows (in their
Arrow form; ``sink.driver-write.*``; 0 = never) is collected on the driver as Arrow, encoded there and written
by the very entry a task uses (`write_partition`), in this process, as partition 0 of the micro-batch: the
same encoders, chunking, chunk tags, fencing, roll call and ledger, so the guarantee is the task path's. The
rows are encoded as one batch, so an ordered changelog (``order_by``) is sorted and compacted across all
of them, as Spark lays a big batch out for its tasks.

Deciding costs one JVM-only Spark job, which for a small batch is the only one: ``coalesce(cores).limit(
max_rows + 1)`` of the rows is collected, each task stopping once the limit is passed, and a small batch is
written from those very rows. A batch found too big is computed again by the write job, up to where the
probe's tasks stopped (a ``foreachBatch`` batch is one RDD: Spark runs its shuffle stages once); persisting
it instead would cost every small batch a cache of its rows, and every big one a copy of all of them. A
known size estimate far over the byte limit skips the probe, and so does a batch that follows a big one
(the writer passes ``likely_big``): a query's batches tend to stay big or small, so a big stream pays no
probe, and its first small batch (the task path's metrics count its rows) has the next one probed again.

Exactly-once: each driver write is an attempt of its own kind (`PartitionContext.on_driver`): for the
protocol, an attempt of the batch's only partition, ordered by its number. A failed append (`WriteError`) is
retried here as the next attempt, which signs in after the failed one, so the roll call makes it a retry
(barrier, read back, subtract), as for a Spark task retry. Nothing else writes the
batch in that epoch: the task path is chosen before anything is written and never after. A driver that
dies mid-write leaves the batch uncommitted; the restarted query replays it as a recovery (a new epoch
whose barrier fences the dead driver's appends out), laid out in one partition when it is small again: the
probe's rows are that partition.
Under Spark Connect, ``foreachBatch`` runs in a Python process on the server, next to the session: the
batch is written from there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa
from pyspark.sql.types import ArrayType, DataType, MapType, StructField, StructType

from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._write.driver.sizing import cores
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext
from s2_sink.encoders._change_order import col
from s2_sink.errors import WriteError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from s2_sink._write.driver.delivery import BatchJob
    from s2_sink._write.frame_encoding import FrameEncoding
    from s2_sink.config import S2Config

__all__ = ["collect_arrow", "is_small", "probe_small", "write_on_driver"]

log = logging.getLogger(__name__)

_ATTEMPTS: Final = 3
"""Driver attempts of one micro-batch's write (Spark's default task attempts less one)."""
_ESTIMATE_SLACK: Final = 4
"""A size estimate this many times the byte limit skips the probe (estimates are rough both ways)."""
_ARROW_CHUNK_ROWS: Final = 4096


@contextmanager
def probe_small(
    rows: DataFrame,
    cfg: S2Config,
    size_estimate: int | None,
    *,
    likely_big: bool = False,
) -> Iterator[pa.Table | None]:
    """The batch's rows as one Arrow table when the batch is small enough to write from the driver, else
    ``None``; `likely_big` (the previous batch was not small) skips the probe."""
    if (
        not (cfg.driver_write_max_rows and cfg.driver_write_max_bytes)  # 0 = never
        or likely_big
        or (size_estimate is not None and size_estimate > _ESTIMATE_SLACK * cfg.driver_write_max_bytes)
    ):
        yield None
        return
    table = _probe(rows, cfg)
    yield table if is_small(table.num_rows, table.nbytes, cfg) else None


def _probe(rows: DataFrame, cfg: S2Config) -> pa.Table:
    # One task per core, each stopping after the limit: coalesce(1) would run the batch's upstream stage
    # (an aggregation's 200 state partitions) on one core.
    return collect_arrow(_nested_nullable(rows).coalesce(cores(rows)).limit(cfg.driver_write_max_rows + 1))


def _nested_nullable(rows: DataFrame) -> DataFrame:
    """`rows` with every nested field, element and value nullable: collecting as Arrow casts the batches to
    the schema, which refuses a non-null field under a null struct (``when(c, struct(...))``), a shape
    ``mapInArrow`` hands a task as it is."""
    schema = rows.schema
    relaxed = [_relaxed(f.dataType) for f in schema.fields]
    if all(r == f.dataType for r, f in zip(relaxed, schema.fields, strict=True)):
        return rows
    return rows.select(
        *[
            col(f.name) if r == f.dataType else col(f.name).cast(r).alias(f.name)
            for r, f in zip(relaxed, schema.fields, strict=True)
        ]
    )


def _relaxed(dtype: DataType) -> DataType:
    if isinstance(dtype, StructType):
        return StructType([StructField(f.name, _relaxed(f.dataType), True) for f in dtype.fields])
    if isinstance(dtype, ArrayType):
        return ArrayType(_relaxed(dtype.elementType), True)
    if isinstance(dtype, MapType):
        return MapType(dtype.keyType, _relaxed(dtype.valueType), True)
    return dtype


def is_small(rows: int, nbytes: int | None, cfg: S2Config) -> bool:
    """Whether a batch of `rows` rows (and `nbytes` bytes of record frame, when known) is within the
    driver-write limits: the writer probes the next batch only after such a one."""
    return rows <= cfg.driver_write_max_rows and (nbytes is None or nbytes <= cfg.driver_write_max_bytes)


def collect_arrow(frame: DataFrame) -> pa.Table:
    """`frame` collected on the driver as one Arrow table (JVM tasks only: no Python worker runs)."""
    to_arrow = getattr(frame, "toArrow", None)  # pyspark >= 4.0, classic and Connect
    if to_arrow is not None:
        table: pa.Table = to_arrow()
        return table
    batches = frame._collect_as_arrow()  # type: ignore[operator]  # pyspark 3.5 classic
    return pa.Table.from_batches(batches, schema=batches[0].schema) if batches else pa.table({})


def write_on_driver(job: BatchJob, encoding: FrameEncoding, table: pa.Table) -> list[dict[str, Any]]:
    """Write the small batch `table` (the probe's rows) with `job`'s plan in this process; the result rows.

    The rows are encoded as one Arrow batch, so an ordered changelog is sorted (and compacted) across the
    whole batch, as Spark lays it out for the tasks. A replay is one partition: every record is its own."""
    if job.recovery_layout:
        job = job.laid_out(RecoveryLayout.single())
    frames = replace(encoding, arranged=True).frames(table.combine_chunks().to_batches())
    batches = [f.slice(i, _ARROW_CHUNK_ROWS) for f in frames for i in range(0, f.num_rows, _ARROW_CHUNK_ROWS)]
    for attempt in range(_ATTEMPTS):
        ctx = PartitionContext.on_driver(job.batch_id, attempt)
        try:
            rows: list[dict[str, Any]] = write_partition(job.plan, batches, ctx).to_pylist()
            return rows
        except WriteError as exc:
            # Fenced, replay mismatches and bad rows are final, as they are for a task; an append that
            # failed for good may have landed: the next attempt reads back before writing again.
            if type(exc) is not WriteError or attempt + 1 == _ATTEMPTS:
                raise
            log.warning(
                "driver write of batch %s failed (attempt %s), retrying as attempt %s: %s",
                job.batch_id,
                attempt,
                attempt + 1,
                exc,
            )
    raise AssertionError("unreachable")
