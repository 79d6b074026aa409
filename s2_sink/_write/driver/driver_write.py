"""Small micro-batches written from the driver process, skipping the per-task floor.

A Python write task costs ~150-400 ms before its first row; a 1k-row micro-batch costs ~10 ms to append.
So a batch of at most ``driver_write_max_rows`` rows and ``driver_write_max_bytes`` bytes of record frame
(``sink.driver-write.*``; 0 = never) is collected on the driver as Arrow and written by the very entry a
task uses (`write_partition`), in this process, as partition 0 of the micro-batch: the same encoders,
chunking, chunk tags, fencing, roll call and ledger, so the guarantee is the task path's.

Deciding costs one JVM-only Spark job: the frame is persisted (so a batch found too big is not computed
twice, its shuffles included) and ``coalesce(cores).limit(max_rows + 1)`` is collected, each task stopping
once the limit is passed. A known size estimate far over the byte limit skips that job.

Exactly-once: the driver is one task attempt of partition 0 with task ids 0, 1, 2 (stage -1). A failed
append (`WriteError`) is retried here as the next attempt, which signs in after the failed one, so the roll
call makes it a retry (barrier, read back, subtract), as for a Spark task retry. Nothing else writes the
batch in that epoch: the task path is chosen before anything is written and never after. A driver that
dies mid-write leaves the batch uncommitted; the restarted query replays it as a recovery (a new epoch
whose barrier fences the dead driver's appends out), laid out in one partition when it is small again.
Under Spark Connect, ``foreachBatch`` runs in a Python process on the server, next to the session: the
batch is written from there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

import pyarrow as pa

from s2_sink._write.driver.sizing import cores
from s2_sink._write.plan import PartitionContext
from s2_sink._write.task.partition_writer import write_partition
from s2_sink.encoders._change_order import ORDER, sort_changes
from s2_sink.errors import WriteError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from s2_sink._write.driver.delivery import BatchJob
    from s2_sink.config import S2Config

__all__ = ["DRIVER_STAGE", "collect_arrow", "probe_small", "write_on_driver"]

log = logging.getLogger(__name__)

DRIVER_STAGE: Final = -1
"""The stage id of a driver write's `PartitionContext` (no Spark stage ran it)."""
_ATTEMPTS: Final = 3
"""Driver attempts of one micro-batch's write (Spark's default task attempts less one)."""
_ESTIMATE_SLACK: Final = 4
"""A size estimate this many times the byte limit skips the probe (estimates are rough both ways)."""
_ARROW_CHUNK_ROWS: Final = 4096


def enabled(cfg: S2Config) -> bool:
    return cfg.driver_write_max_rows > 0 and cfg.driver_write_max_bytes > 0


@contextmanager
def probe_small(
    frame: DataFrame, cfg: S2Config, size_estimate: int | None
) -> Iterator[tuple[DataFrame, pa.Table | None]]:
    """``(frame to write, table)``: `table` is the whole record frame as Arrow when the batch is small
    enough to write from the driver, else ``None``; the frame to write is persisted while the block runs."""
    if not enabled(cfg) or (
        size_estimate is not None and size_estimate > _ESTIMATE_SLACK * cfg.driver_write_max_bytes
    ):
        yield frame, None
        return
    from pyspark import StorageLevel  # noqa: PLC0415 - the writer imports pyspark already

    cached = frame.persist(StorageLevel.MEMORY_AND_DISK)
    try:
        # One task per core, each stopping after the limit: coalesce(1) would run the batch's upstream
        # stage (an aggregation's 200 state partitions) on one core.
        probe = cached.coalesce(cores(frame)).limit(cfg.driver_write_max_rows + 1)
        table = collect_arrow(probe)
        small = table.num_rows <= cfg.driver_write_max_rows and table.nbytes <= cfg.driver_write_max_bytes
        yield cached, table if small else None
    finally:
        cached.unpersist()


def collect_arrow(frame: DataFrame) -> pa.Table:
    """`frame` collected on the driver as one Arrow table (JVM tasks only: no Python worker runs)."""
    to_arrow = getattr(frame, "toArrow", None)  # pyspark >= 4.0, classic and Connect
    if to_arrow is not None:
        table: pa.Table = to_arrow()
        return table
    batches = frame._collect_as_arrow()  # type: ignore[operator]  # pyspark 3.5 classic
    return pa.Table.from_batches(batches, schema=batches[0].schema) if batches else pa.table({})


def write_on_driver(job: BatchJob, frame: DataFrame, table: pa.Table) -> list[dict[str, Any]]:
    """Write the small batch `table` (the probe's rows of `frame`) with `job`'s plan in this process; the
    result rows.

    A batch in change order (``order_by``) or laid out for a replay is collected again, sorted, from the
    persisted `frame`: the probe's rows are in no particular order."""
    if ORDER in frame.columns or job.plan.fixed_layout:
        table = collect_arrow(sort_changes(frame.coalesce(1)))
    batches = table.to_batches(max_chunksize=_ARROW_CHUNK_ROWS)
    for attempt in range(_ATTEMPTS):
        ctx = PartitionContext(job.batch_id, 0, attempt, attempt, DRIVER_STAGE)
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
