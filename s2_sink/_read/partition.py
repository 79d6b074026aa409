"""The unit of work of the s2 source: seq_num ranges of one or more streams, planned on the driver and read by
one Spark task into Arrow batches of the output schema.

Small streams share a partition (`planning.offsets.pack_ranges`): a Spark task costs a Python worker's
floor, about what thousands of records cost, so a partition per small stream would make reading many of
them cost that floor per stream. A task reads its ranges several at a time (`ranges.read_partition`)
and hands Spark batches of several streams' rows.

`S2Partition` is planned in processes that need none of the reading (creating the source, planning a
read): it is plain data, and this module imports nothing of the read.
"""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql.datasource import InputPartition

__all__ = ["S2Partition"]


class S2Partition(InputPartition):
    """Records of each ``(stream, first, stop)`` of ``ranges``: ``first <= seq_num < stop``. Plain data: it
    is pickled to the executor."""

    def __init__(self, ranges: Iterable[tuple[str, int, int]], *, materialize: bool = False) -> None:
        self.ranges = tuple(ranges)
        super().__init__(self.ranges)
        self.materialize = materialize

    def __repr__(self) -> str:
        shown = ", ".join(f"{s!r}[{lo}, {hi})" for s, lo, hi in self.ranges[:3])
        more = f", ... ({len(self.ranges)} ranges)" if len(self.ranges) > 3 else ""
        return f"S2Partition({shown}{more})"
