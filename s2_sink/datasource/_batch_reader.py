"""``spark.read.format("s2")``: read a bounded seq_num range of one or more streams."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition

from s2_sink._read.partition import S2Partition
from s2_sink._read.rows.schemas import rows_kind

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from s2_sink._read.read_options import ReadOptions
    from s2_sink.config import S2Config

__all__ = ["S2BatchReader"]


class S2BatchReader(DataSourceReader):
    """Plans the ranges on the driver, small streams sharing a partition. Spark pickles the reader into every
    read task, whose fresh worker imports this module: the planning is imported where it runs."""

    def __init__(self, cfg: S2Config, opts: ReadOptions, schema: StructType) -> None:
        self._cfg = cfg
        self._opts = opts
        self._schema = schema
        self._kind = rows_kind(opts.format, schema)  # on the driver: how every task makes its rows

    def partitions(self) -> list[InputPartition]:
        from s2_sink._read.planning.micro_batches import batch_ranges  # noqa: PLC0415 - the driver's (class doc)

        parts = batch_ranges(self._cfg, self._opts)
        return [S2Partition(ranges, materialize=self._opts.materialize) for ranges in parts]

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        from s2_sink._read.ranges import read_partition  # noqa: PLC0415 - the task's (`_read.partition`)

        # A batch read takes what is retained between its bounds: records trimmed before it are not a loss.
        return read_partition(self._cfg, self._kind, self._schema, partition, on_loss="ignore")
