"""Per-micro-batch metrics, aggregated on the driver from the tasks' result rows."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["BatchMetrics", "StreamMetrics", "aggregate", "percentile"]


@dataclass(frozen=True, slots=True)
class StreamMetrics:
    """What one micro-batch appended to one stream."""

    stream: str
    records: int
    bytes: int
    appends: int
    retries: int
    first_seq: int | None
    """Lowest first sequence number any task's acks reported (None if nothing was acknowledged)."""
    end_seq: int | None
    """Highest end (one past the last) sequence number any task's acks reported."""
    tokens: tuple[str, ...] = ()
    """Fencing tokens tasks last appended with after a 412 changed theirs (exactly-once), sorted."""


@dataclass(frozen=True, slots=True)
class BatchMetrics:
    """Metrics of one micro-batch written by `S2Writer` (``writer.last_metrics``, ``writer.history``)."""

    batch_id: int
    rows_in: int = 0
    """Rows of the micro-batch that reached the writer."""
    records: int = 0
    """Records appended (data and dead letters)."""
    bytes: int = 0
    """Metered bytes appended."""
    appends: int = 0
    """Acknowledged append calls (batches of up to 1000 records / 1 MiB)."""
    retries: int = 0
    """Session-level retries (reopened sessions); the SDK's own request retries are not counted."""
    skipped: int = 0
    """Bad rows dropped under ``on_error="skip"``."""
    dead_lettered: int = 0
    """Bad rows sent to the dead-letter stream under ``on_error="dlq"``."""
    streams: tuple[str, ...] = ()
    """Streams written to, sorted."""
    partitions: int = 0
    """Tasks that reported."""
    duration_s: float = 0.0
    """Wall time of the micro-batch on the driver (evaluation and appends)."""
    ack_latency_p50_ms: float | None = None
    ack_latency_p99_ms: float | None = None
    per_stream: tuple[StreamMetrics, ...] = field(default=())
    delivery: str = "at-least-once"
    replay_skipped: bool = False
    """The ledger already had this batch committed (Spark replayed it after a restart): nothing was
    written, and every count is 0 (`skipped_replay`)."""
    path: str = "tasks"
    """Where the batch was written: ``"tasks"`` (Spark tasks, ``partitions`` of them) or ``"driver"`` (a
    small batch written from the driver process, as one partition)."""

    @classmethod
    def skipped_replay(cls, batch_id: int, *, delivery: str = "exactly-once") -> BatchMetrics:
        """The metrics of a replayed batch that was skipped because the ledger has it committed."""
        return cls(batch_id, delivery=delivery, replay_skipped=True)

    @property
    def records_per_s(self) -> float:
        """Records appended per second of batch wall time."""
        return self.records / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def rows_per_s(self) -> float:
        """Input rows per second of batch wall time."""
        return self.rows_in / self.duration_s if self.duration_s > 0 else 0.0

    def end_positions(self) -> dict[str, int]:
        """stream -> highest acknowledged end sequence number in this batch."""
        return {s.stream: s.end_seq for s in self.per_stream if s.end_seq is not None}

    def stream_tokens(self) -> dict[str, tuple[str, ...]]:
        """Per stream, the fencing tokens tasks switched to (the exactly-once driver hands the newest
        generation to the next micro-batch's tasks)."""
        return {s.stream: s.tokens for s in self.per_stream if s.tokens}

    def as_dict(self) -> dict[str, Any]:
        """Plain dict (JSON-able) for user monitoring."""
        out = asdict(self)
        out["records_per_s"] = self.records_per_s
        return out

    def log_line(self) -> str:
        """The one-line key=value summary logged at INFO per micro-batch."""
        p50 = "-" if self.ack_latency_p50_ms is None else f"{self.ack_latency_p50_ms:.1f}"
        p99 = "-" if self.ack_latency_p99_ms is None else f"{self.ack_latency_p99_ms:.1f}"
        return (
            f"s2 batch={self.batch_id} rows_in={self.rows_in} records={self.records} bytes={self.bytes} "
            f"appends={self.appends} retries={self.retries} skipped={self.skipped} "
            f"dead_lettered={self.dead_lettered} streams={len(self.streams)} partitions={self.partitions} "
            f"duration_s={self.duration_s:.3f} records_per_s={self.records_per_s:.0f} "
            f"ack_p50_ms={p50} ack_p99_ms={p99} delivery={self.delivery} path={self.path}"
        )


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]) of `values`, or None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def aggregate(
    batch_id: int,
    rows: Iterable[Mapping[str, Any]],
    duration_s: float,
    *,
    delivery: str = "at-least-once",
    path: str = "tasks",
) -> BatchMetrics:
    """Fold the tasks' result rows (``results.RESULT_SCHEMA``) into one `BatchMetrics`: a task's row (no
    stream) counts its input, a (task, stream) row what it appended there."""
    tasks: list[Mapping[str, Any]] = []
    by_stream: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        if row["stream"] is None:
            tasks.append(row)
        else:
            by_stream.setdefault(row["stream"], []).append(row)
    per_stream = tuple(_stream_metrics(s, by_stream[s]) for s in sorted(by_stream))
    latencies = [ms for part in by_stream.values() for row in part for ms in row["latencies_ms"] or ()]
    return BatchMetrics(
        batch_id=batch_id,
        rows_in=sum(row["rows_in"] for row in tasks),
        records=sum(s.records for s in per_stream),
        bytes=sum(s.bytes for s in per_stream),
        appends=sum(s.appends for s in per_stream),
        retries=sum(s.retries for s in per_stream),
        skipped=sum(row["skipped"] for row in tasks),
        dead_lettered=sum(row["dead_lettered"] for row in tasks),
        streams=tuple(s.stream for s in per_stream if s.appends),
        partitions=len({row["partition"] for row in tasks}),
        duration_s=duration_s,
        ack_latency_p50_ms=percentile(latencies, 50),
        ack_latency_p99_ms=percentile(latencies, 99),
        per_stream=per_stream,
        delivery=delivery,
        path=path,
    )


def _stream_metrics(stream: str, rows: list[Mapping[str, Any]]) -> StreamMetrics:
    firsts = [row["first_seq"] for row in rows if row["first_seq"] is not None]
    ends = [row["end_seq"] for row in rows if row["end_seq"] is not None]
    records, nbytes, appends, retries = (
        sum(row[k] for row in rows) for k in ("records", "bytes", "appends", "retries")
    )
    return StreamMetrics(
        stream,
        records,
        nbytes,
        appends,
        retries,
        first_seq=min(firsts, default=None),
        end_seq=max(ends, default=None),
        tokens=tuple(sorted({row["token"] for row in rows if row.get("token")})),
    )
