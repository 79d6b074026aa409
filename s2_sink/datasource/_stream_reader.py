"""``spark.readStream.format("s2")``: Spark's streaming reader API over `MicroBatches`.

Per-trigger limits take two Spark APIs: pyspark 4.1 gives ``latestOffset()`` neither a start nor a limit, so
the reader caps relative to a frontier it tracks (restored on restart by ``partitions(latest, latest)``);
pyspark 4.2+ passes both, and ``prepareForTriggerAvailableNow()`` fixes the tails an AvailableNow run drains
(docs/format-s2.md, *Per-trigger limits*).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from s2_sink._read.partition import S2Partition
from s2_sink._read.planning.data_loss import LossPolicy
from s2_sink._read.planning.micro_batches import MicroBatches
from s2_sink._read.read_options import ReadOptions
from s2_sink._read.rows.schemas import rows_kind
from s2_sink.config import S2Config
from s2_sink.encoders._arrow_types import to_arrow_schema

__all__ = ["S2StreamReader"]


_STREAMING = "pyspark.sql.streaming.datasource"
try:  # pyspark 4.2+'s SupportsTriggerAvailableNow (Spark checks it with isinstance); ``object`` before
    _AVAILABLE_NOW: type = importlib.import_module(_STREAMING).SupportsTriggerAvailableNow
except (ImportError, AttributeError):
    _AVAILABLE_NOW = object


def _read_limit(name: str, **fields: int) -> object:
    return getattr(importlib.import_module(_STREAMING), name)(**fields)


class S2StreamReader(DataSourceStreamReader, _AVAILABLE_NOW):  # type: ignore[misc]
    """Driver-side planner of micro-batches; ``read`` runs on executors."""

    def __init__(self, cfg: S2Config, opts: ReadOptions, schema: StructType) -> None:
        self._cfg = cfg
        self._opts = opts
        self._schema = schema
        self._plan = MicroBatches(cfg, opts)
        self._target = to_arrow_schema(schema)  # on the driver, once: every task's batches are of it
        self._kind = rows_kind(opts.format, schema)  # and how every task makes them

    def initialOffset(self) -> dict[str, object]:
        return self._plan.initial()

    def latestOffset(self, start: dict[str, object] | None = None, limit: object = None) -> dict[str, object]:
        max_records, max_bytes = self._caps(limit)
        return self._plan.latest(start, max_records, max_bytes)

    def _caps(self, limit: object) -> tuple[int | None, int | None]:
        """(records, bytes) caps for a batch: the options', unless Spark asks for everything."""
        if type(limit).__name__ == "ReadAllAvailable":
            # Trigger.Once and the like: the engine wants all of it, whatever the options say.
            return None, None
        records = getattr(limit, "max_rows", None) or self._opts.max_records_per_trigger
        byte_cap = getattr(limit, "max_bytes", None) or self._opts.max_bytes_per_trigger
        return records, byte_cap

    def getDefaultReadLimit(self) -> object:
        if self._opts.max_records_per_trigger is not None:
            # With both caps set the byte cap comes from the options (one ReadLimit per call).
            return _read_limit("ReadMaxRows", max_rows=self._opts.max_records_per_trigger)
        if self._opts.max_bytes_per_trigger is not None:
            return _read_limit("ReadMaxBytes", max_bytes=self._opts.max_bytes_per_trigger)
        return _read_limit("ReadAllAvailable")

    def prepareForTriggerAvailableNow(self) -> None:
        self._plan.drain_to_tails()

    def reportLatestOffset(self) -> dict[str, int] | None:
        """pyspark 4.2+: the tails seen last, the source's latest offset in the query progress."""
        return self._plan.tails_seen()

    def partitions(self, start: dict[str, object], end: dict[str, object]) -> list[InputPartition]:
        return [S2Partition(ranges) for ranges in self._plan.ranges(start, end)]

    def read(self, partition: InputPartition | None) -> Iterator[pa.RecordBatch]:
        from s2_sink._read.ranges import read_partition  # noqa: PLC0415 - the task's (`_read.partition`)

        policy: LossPolicy = "fail" if self._opts.fail_on_data_loss else "warn"
        kind, schema = self._kind, self._schema
        return read_partition(self._cfg, kind, schema, partition, on_loss=policy, target=self._target)

    def commit(self, end: dict[str, object]) -> None:
        # Nothing to release: S2 keeps records by retention, not by consumer acknowledgement.
        return None
