"""The unit of work of the s2 source: seq_num ranges of one or more streams, read by one Spark task.

Small streams share a partition, since a task's floor costs what thousands of records do
(docs/architecture.md, *Reading, by stage*). Plain data, importing nothing of the read: the processes
that create the source and plan a read need none of it.
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
