"""Micro-batches written with the exactly-once protocol's own blocks (no Spark): an execution's epoch, its
tasks' partitions and its ledger commit are separate calls, so a test can stop an execution between them
the way a dead driver would."""

from __future__ import annotations

import pyarrow as pa

from s2_sink._exactly_once.sink_run import SinkRun, commit_sink_run, open_sink_run
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext
from s2_sink.config import S2Config

__all__ = ["commit", "new_driver_process", "open_execution", "write_partitions"]

QUERY_ID = "query-1"


def new_driver_process() -> None:
    """What a restarted driver process starts with, for a test that restarts "the driver" in its own
    process by calling a new `S2Writer` outside any streaming query (no run id to tell the starts apart):
    no writer of the process has begun a micro-batch. Without it the new writer is refused, as a second
    writer of one identity in a micro-batch would be."""
    from s2_sink._write.driver import delivery

    delivery._claims.clear()


def open_execution(cfg: S2Config, writer_id: str) -> SinkRun:
    """The driver plans one micro-batch execution: its epoch continued with an ``intent`` when this process
    planned the last committed one, else a new epoch (ledger ``open``, stream fenced)."""
    assert cfg.stream is not None
    return open_sink_run(cfg, writer_id, QUERY_ID, [cfg.stream])


def write_partitions(
    run: SinkRun, cfg: S2Config, batch: int, partitions: dict[int, list[bytes]]
) -> dict[str, int]:
    """The tasks of `batch` write their partitions (bodies to ``cfg.stream``) under `run`'s epoch; the
    stream ends their acknowledgements reported, as the driver aggregates them for the commit."""
    epoch = run.plan_batch(batch, QUERY_ID)
    assert epoch is not None, f"batch {batch} is already committed"
    plan = WriteSpec.build(cfg, Routing.build(stream=cfg.stream, stream_column=None, shards=None)).plan(
        batch, epoch
    )
    rows = []
    for partition, bodies in partitions.items():
        frame = pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})
        result = write_partition(plan, [frame], PartitionContext(batch, partition, 0, 0, 0))
        rows.extend(result.to_pylist())
    return aggregate(batch, rows, 0.0, delivery="exactly-once").end_positions()


def commit(run: SinkRun, cfg: S2Config, batch: int, ends: dict[str, int]) -> None:
    """The driver commits `batch` in the ledger on top of `run`'s ``open`` or ``intent``."""
    commit_sink_run(cfg, run.writer_id, run, batch, ends, query_id=QUERY_ID)
