"""The unit of work of the s2 source: one seq_num range of one stream, read by one Spark task."""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

__all__ = ["S2Partition"]


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
