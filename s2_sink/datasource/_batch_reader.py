"""``spark.read.format("s2")``: read a bounded seq_num range of one or more streams."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition

from s2_sink._read.partition import S2Partition

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from s2_sink._read.read_options import ReadOptions
    from s2_sink.config import S2Config

__all__ = ["S2BatchReader"]

log = logging.getLogger(__name__)


class S2BatchReader(DataSourceReader):
    """Plans one partition per stream range on the driver; each task reads its range with the SDK.

    Spark pickles the reader into every read task, whose fresh Python worker imports this module: the
    planning modules (stream listing, positions, read-committed ends) are imported where they run.
    """

    def __init__(self, cfg: S2Config, opts: ReadOptions, schema: StructType) -> None:
        self._cfg = cfg
        self._opts = opts
        self._schema = schema

    def partitions(self) -> list[InputPartition]:
        from s2_sink._read.committed import CommittedEnds  # noqa: PLC0415
        from s2_sink._read.offsets import cap_committed, plan_ranges  # noqa: PLC0415
        from s2_sink._read.planner import resolve_bound, resolve_streams  # noqa: PLC0415
        from s2_sink._read.read_options import (  # noqa: PLC0415
            OPT_ENDING_POSITION,
            OPT_STARTING_POSITION,
        )

        streams = resolve_streams(self._cfg, self._opts)
        # Read-committed: the committed ends first, then the tails (see _committed).
        by = self._opts.committed_by
        committed = CommittedEnds(self._cfg, by).fetch() if by is not None else None
        cfg, opts = self._cfg, self._opts
        start = resolve_bound(cfg, opts.start, streams, option=OPT_STARTING_POSITION, committed=committed)
        end = resolve_bound(cfg, opts.end, streams, option=OPT_ENDING_POSITION, committed=committed)
        end = cap_committed(end, committed)  # explicit seq_num and timestamp ends too
        if self._opts.materialize:
            # The latest row per key needs the key's whole history in one task: one partition per stream.
            per_partition = max([end[s] - start.get(s, 0) for s in end] + [1])
        else:
            per_partition = self._opts.records_per_partition
        ranges = plan_ranges(start, end, per_partition)
        log.info("s2 source: batch read of %d streams in %d partitions", len(streams), len(ranges))
        return [S2Partition(s, lo, hi, materialize=self._opts.materialize) for s, lo, hi in ranges]

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        if partition is None:
            # Spark plans one partition of None when there are no ranges to read.
            return iter(())
        assert isinstance(partition, S2Partition)
        from s2_sink._read.task import read_partition  # noqa: PLC0415

        # A batch read takes what is retained between its bounds: records trimmed before it are not a loss.
        return read_partition(self._cfg, self._opts.format, self._schema, partition, on_loss="ignore")
