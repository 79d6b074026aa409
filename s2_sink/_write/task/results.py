"""What a task reports: per-stream totals kept while appending, and the small result rows
(`RESULT_SCHEMA`) the driver folds into `BatchMetrics` and the exactly-once commit."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
from s2_sdk import AppendAck

from s2_sink._write.write_plan import PartitionContext

__all__ = ["RESULT_DDL", "RESULT_SCHEMA", "StreamTotals", "result_rows"]

RESULT_SCHEMA: Final = pa.schema(
    [
        pa.field("partition", pa.int32(), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("stream", pa.string()),
        pa.field("rows_in", pa.int64(), nullable=False),
        pa.field("records", pa.int64(), nullable=False),
        pa.field("bytes", pa.int64(), nullable=False),
        pa.field("appends", pa.int64(), nullable=False),
        pa.field("retries", pa.int64(), nullable=False),
        pa.field("skipped", pa.int64(), nullable=False),
        pa.field("dead_lettered", pa.int64(), nullable=False),
        pa.field("first_seq", pa.int64()),
        pa.field("end_seq", pa.int64()),
        pa.field("latencies_ms", pa.list_(pa.float64())),
        pa.field("duration_ms", pa.float64(), nullable=False),
        pa.field("token", pa.string()),
    ]
)
"""One row per (task, stream) written, plus the task's totals row (``stream = null``). ``token``: the
fencing token a 412 made the task change to on that stream (null: the plan's)."""

RESULT_DDL: Final = (
    "partition int, attempt int, stream string, rows_in bigint, records bigint, bytes bigint, "
    "appends bigint, retries bigint, skipped bigint, dead_lettered bigint, first_seq bigint, "
    "end_seq bigint, latencies_ms array<double>, duration_ms double, token string"
)


@dataclass(slots=True, eq=False)
class StreamTotals:
    latency_sample: int
    """Ack latencies kept (a reservoir sample)."""
    records: int = 0
    bytes: int = 0
    appends: int = 0
    retries: int = 0
    first_seq: int | None = None
    end_seq: int | None = None
    latencies: list[float] = field(default_factory=list)
    seen_acks: int = 0
    token: str | None = None
    rng: random.Random | None = None
    """Made once the sample is full: generator state a task routing to many streams keeps per stream."""

    def covers(self, end: int) -> None:
        """Records a retry or replay dropped from its appends reach `end`: the committed end covers them."""
        self.end_seq = end if self.end_seq is None else max(self.end_seq, end)

    def acked(self, records: int, nbytes: int, ack: AppendAck, latency_ms: float) -> None:
        self.records += records
        self.bytes += nbytes
        self.appends += 1
        if self.first_seq is None:
            self.first_seq = ack.start.seq_num
        self.end_seq = ack.end.seq_num
        self.seen_acks += 1
        cap = self.latency_sample
        if len(self.latencies) < cap:
            self.latencies.append(latency_ms)
        else:
            if self.rng is None:
                self.rng = random.Random()
            j = self.rng.randrange(self.seen_acks)
            if j < cap:
                self.latencies[j] = latency_ms


def result_rows(
    ctx: PartitionContext,
    *,
    rows_in: int,
    skipped: int,
    dead_lettered: int,
    streams: Iterable[tuple[str, StreamTotals]],
    duration_ms: float,
) -> pa.RecordBatch:
    task = dict.fromkeys(RESULT_SCHEMA.names, 0) | {
        "partition": ctx.partition_id,
        "attempt": ctx.attempt_number,
        "duration_ms": duration_ms,
        **dict.fromkeys(("stream", "first_seq", "end_seq", "latencies_ms", "token")),
    }
    rows: list[dict[str, Any]] = [
        task | {"rows_in": rows_in, "skipped": skipped, "dead_lettered": dead_lettered}
    ]
    for name, st in streams:
        if st.appends == 0 and st.retries == 0 and st.end_seq is None:
            continue
        mine = ("records", "bytes", "appends", "retries", "first_seq", "end_seq", "token")
        rows.append(task | {k: getattr(st, k) for k in mine} | {"stream": name, "latencies_ms": st.latencies})
    return pa.RecordBatch.from_pylist(rows, schema=RESULT_SCHEMA)
