"""``spark.readStream.format("s2")``: micro-batches over per-stream seq_num offsets.

Offsets are ``{stream: next seq_num}``; the offset log in the checkpoint makes reading exactly-once: a
restarted query replays a planned batch with the same offsets and continues after the last committed one.

Per-trigger limit: pyspark 4.1.1's Python stream reader has no admission control (``latestOffset()`` gets
neither the start offset nor a read limit), so ``s2.max-records-per-trigger`` caps the end offset inside
``latestOffset`` relative to a frontier the reader tracks: the last end it planned or was told about. After a
restart Spark calls ``partitions(latest, latest)`` with the last logged offset (``setLatestSeenOffset``),
which restores the frontier.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from s2_sink.config import S2Config
from s2_sink.datasource import _s2io
from s2_sink.datasource._offsets import Offsets, advance, cap_total, max_merge, plan_ranges
from s2_sink.datasource._partition import S2Partition
from s2_sink.datasource._planner import resolve_bound, resolve_streams, sorted_offsets
from s2_sink.datasource._read_options import OPT_STARTING_POSITION, ReadOptions
from s2_sink.datasource._read_task import read_partition

__all__ = ["S2StreamReader"]

log = logging.getLogger(__name__)


def _as_offsets(raw: dict[str, object]) -> Offsets:
    return {str(k): int(v) for k, v in raw.items()}  # type: ignore[call-overload]  # JSON values are ints


class S2StreamReader(DataSourceStreamReader):
    """Driver-side planner of micro-batches; ``read`` runs on executors."""

    def __init__(self, cfg: S2Config, opts: ReadOptions, schema: StructType) -> None:
        self._cfg = cfg
        self._opts = opts
        self._schema = schema
        # Driver-only planning state (lives as long as the query run; rebuilt from the offset log on restart).
        self._initial: Offsets | None = None
        self._frontier: Offsets | None = None

    def initialOffset(self) -> dict[str, int]:
        # Resolved once per run: Spark may ask again before the first batch; "latest" must not move meanwhile.
        if self._initial is None:
            streams = resolve_streams(self._cfg, self._opts)
            self._initial = resolve_bound(self._cfg, self._opts.start, streams, option=OPT_STARTING_POSITION)
            log.info("s2 source: initial offsets %s", self._initial)
        self._frontier = max_merge(self._frontier or {}, self._initial)
        return dict(self._initial)

    def latestOffset(self) -> dict[str, int]:
        frontier = self._frontier if self._frontier is not None else self.initialOffset()
        streams = resolve_streams(self._cfg, self._opts)
        # Under a prefix a listed stream may be deleted before its tail is read: skip it then.
        found = _s2io.tails(self._cfg, streams, missing_ok=self._opts.stream_prefix is not None)
        target = advance(frontier, found)
        end = sorted_offsets(cap_total(frontier, target, self._opts.max_records_per_trigger))
        self._frontier = end
        return end

    def partitions(self, start: dict[str, object], end: dict[str, object]) -> list[InputPartition]:
        begin, stop = _as_offsets(start), _as_offsets(end)
        self._frontier = max_merge(self._frontier or {}, stop)
        ranges = plan_ranges(begin, stop, self._opts.records_per_partition)
        return [S2Partition(s, lo, hi) for s, lo, hi in ranges]

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        if partition is None:
            # Spark plans one partition of None when there are no ranges to read.
            return iter(())
        assert isinstance(partition, S2Partition)
        return read_partition(self._cfg, self._opts.format, self._schema, partition)

    def commit(self, end: dict[str, object]) -> None:
        # Nothing to release: S2 keeps records by retention, not by consumer acknowledgement.
        return None
