"""The unit of work of the s2 source: one seq_num range of one stream, planned on the driver and read by one
Spark task into Arrow batches of the output schema.

`S2Partition` is planned in processes that need none of the reading (creating the source, planning a
read): the session, the rows and the loss policy are imported by `read_partition`, in the task.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from s2_sink._read.planning.data_loss import LossPolicy
    from s2_sink._read.read_options import ReadFormat
    from s2_sink.config import S2Config

__all__ = ["S2Partition", "read_partition"]


class S2Partition(InputPartition):
    """Records of ``stream`` with ``first <= seq_num < stop``. Plain data: it is pickled to the executor."""

    def __init__(self, stream: str, first: int, stop: int, *, materialize: bool = False) -> None:
        super().__init__((stream, first, stop))
        self.stream = stream
        self.first = first
        self.stop = stop
        self.materialize = materialize

    def __repr__(self) -> str:
        return f"S2Partition(stream={self.stream!r}, first={self.first}, stop={self.stop})"


def read_partition(
    cfg: S2Config, fmt: ReadFormat, schema: StructType, partition: S2Partition, *, on_loss: LossPolicy
) -> Iterator[pa.RecordBatch]:
    """Every data record of the range (command records such as fences and trims are skipped); records of
    the range that were trimmed or expired are handled by ``on_loss``.

    Records arrive as columns decoded in bulk from the wire and stay columns in every format."""
    from s2_sink._read.planning.data_loss import gap_handler  # noqa: PLC0415 - the task's (module doc)
    from s2_sink._read.rows.formats import columns_to_batch, materialized_batches  # noqa: PLC0415
    from s2_sink._read.session import read_range_columns  # noqa: PLC0415

    on_gap = gap_handler(cfg.basin, partition.stream, on_loss)
    ranges = read_range_columns(cfg, partition.stream, partition.first, partition.stop, on_gap)
    if partition.materialize:
        yield from materialized_batches(fmt, schema, partition.stream, ranges)
        return
    for columns in ranges:  # runs of several read batches (`session.RUN_RECORDS`)
        commands = columns.commands()
        data = columns.take(~commands) if commands.any() else columns
        if len(data):
            yield columns_to_batch(fmt, schema, partition.stream, data)
