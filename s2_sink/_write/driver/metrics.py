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
    rows_in: int
    """Rows of the micro-batch that reached the writer."""
    records: int
    """Records appended (data and dead letters)."""
    bytes: int
    """Metered bytes appended."""
    appends: int
    """Acknowledged append calls (batches of up to 1000 records / 1 MiB)."""
    retries: int
    """Session-level retries (reopened sessions); the SDK's own request retries are not counted."""
    skipped: int
    """Bad rows dropped under ``on_error="skip"``."""
    dead_lettered: int
    """Bad rows sent to the dead-letter stream under ``on_error="dlq"``."""
    streams: tuple[str, ...]
    """Streams written to, sorted."""
    partitions: int
    """Tasks that reported."""
    duration_s: float
    """Wall time of the micro-batch on the driver (evaluation and appends)."""
    ack_latency_p50_ms: float | None
    ack_latency_p99_ms: float | None
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
        return cls(
            batch_id=batch_id,
            rows_in=0,
            records=0,
            bytes=0,
            appends=0,
            retries=0,
            skipped=0,
            dead_lettered=0,
            streams=(),
            partitions=0,
            duration_s=0.0,
            ack_latency_p50_ms=None,
            ack_latency_p99_ms=None,
            delivery=delivery,
            replay_skipped=True,
        )

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
    """Fold the tasks' result rows (``results.RESULT_SCHEMA``) into one `BatchMetrics`."""
    rows_in = skipped = dead = 0
    partitions: set[int] = set()
    per: dict[str, dict[str, Any]] = {}
    tokens: dict[str, set[str]] = {}
    latencies: list[float] = []
    for row in rows:
        stream = row["stream"]
        if stream is None:
            partitions.add(row["partition"])
            rows_in += row["rows_in"]
            skipped += row["skipped"]
            dead += row["dead_lettered"]
            continue
        acc = per.setdefault(
            stream,
            {"records": 0, "bytes": 0, "appends": 0, "retries": 0, "first_seq": None, "end_seq": None},
        )
        tokens.setdefault(stream, set())
        if row.get("token"):
            tokens[stream].add(row["token"])
        for key in ("records", "bytes", "appends", "retries"):
            acc[key] += row[key]
        if row["first_seq"] is not None:
            acc["first_seq"] = (
                row["first_seq"] if acc["first_seq"] is None else min(acc["first_seq"], row["first_seq"])
            )
        if row["end_seq"] is not None:
            acc["end_seq"] = row["end_seq"] if acc["end_seq"] is None else max(acc["end_seq"], row["end_seq"])
        latencies.extend(row["latencies_ms"] or ())
    per_stream = tuple(
        StreamMetrics(stream=s, tokens=tuple(sorted(tokens[s])), **per[s]) for s in sorted(per)
    )
    return BatchMetrics(
        batch_id=batch_id,
        rows_in=rows_in,
        records=sum(s.records for s in per_stream),
        bytes=sum(s.bytes for s in per_stream),
        appends=sum(s.appends for s in per_stream),
        retries=sum(s.retries for s in per_stream),
        skipped=skipped,
        dead_lettered=dead,
        streams=tuple(s.stream for s in per_stream if s.appends),
        partitions=len(partitions),
        duration_s=duration_s,
        ack_latency_p50_ms=percentile(latencies, 50),
        ack_latency_p99_ms=percentile(latencies, 99),
        per_stream=per_stream,
        delivery=delivery,
        path=path,
    )
