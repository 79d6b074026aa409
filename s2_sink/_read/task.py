"""Executor side of the s2 source: read one partition's range and yield Arrow batches in the output schema."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import StructType

from s2_sink._read import s2io as _s2io
from s2_sink._read.data_loss import LossPolicy, gap_handler
from s2_sink._read.formats import columns_to_batch, materialized_batches
from s2_sink._read.partition import S2Partition
from s2_sink._read.read_options import ReadFormat
from s2_sink.config import S2Config

__all__ = ["read_partition"]


def read_partition(
    cfg: S2Config, fmt: ReadFormat, schema: StructType, partition: S2Partition, *, on_loss: LossPolicy
) -> Iterator[pa.RecordBatch]:
    """Every data record of the range (command records such as fences and trims are skipped); records of
    the range that were trimmed or expired are handled by ``on_loss``.

    Records arrive as columns decoded in bulk from the wire and stay columns in every format."""
    on_gap = gap_handler(cfg.basin, partition.stream, on_loss)
    ranges = _s2io.read_range_columns(cfg, partition.stream, partition.first, partition.stop, on_gap)
    if partition.materialize:
        yield from materialized_batches(fmt, schema, partition.stream, ranges)
        return
    for columns in ranges:  # runs of several read batches (`session.RUN_RECORDS`)
        commands = columns.commands()
        data = columns.take(~commands) if commands.any() else columns
        if len(data):
            yield columns_to_batch(fmt, schema, partition.stream, data)
