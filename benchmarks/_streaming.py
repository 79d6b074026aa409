"""Sink latency per micro-batch: a streaming query of fixed 1k-row batches through foreachBatch.

The source is Spark's ``rate-micro-batch`` (exactly ``rowsPerBatch`` rows per batch, whatever the wall
time), shaped into the benchmark's 5 columns. The sink call inside foreachBatch is timed on the driver;
comparing it with a ``noop`` write of the same batch gives the latency the S2 sink adds beyond Spark's own
per-batch job.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from benchmarks._data import shape

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Sink", "latency", "summarize"]

Sink = Callable[["DataFrame", int], None]


def latency(
    spark: SparkSession, sink: Sink, *, batches: int, warmup: int, rows_per_batch: int, tmp: str
) -> list[float]:
    """Seconds each of `batches` micro-batches spent in `sink`, after `warmup` discarded batches."""
    durations: list[float] = []
    enough = threading.Event()
    errors: list[BaseException] = []

    def body(batch_df: DataFrame, batch_id: int) -> None:
        if enough.is_set():
            return
        t0 = time.perf_counter()
        try:
            sink(batch_df, batch_id)
        except BaseException as exc:
            errors.append(exc)
            enough.set()
            raise
        durations.append(time.perf_counter() - t0)
        if len(durations) >= warmup + batches:
            enough.set()

    src = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", 1)
        .load()
    )
    query = (
        shape(src, "value")
        .writeStream.foreachBatch(body)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="ckpt-", dir=tmp))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 600
        while not enough.wait(0.2):
            if not query.isActive or time.monotonic() > deadline:
                break
    finally:
        query.stop()
    if errors:
        raise RuntimeError(f"streaming sink failed: {errors[0]!r}") from errors[0]
    if len(durations) < warmup + batches:
        raise RuntimeError(f"streaming query stopped after {len(durations)} batches: {query.exception()}")
    return durations[warmup : warmup + batches]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def summarize(seconds: list[float]) -> dict[str, float]:
    """Median, p99 and mean in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return {
        "n": float(len(ms)),
        "median_ms": statistics.median(ms),
        "p99_ms": _pct(ms, 0.99),
        "mean_ms": statistics.fmean(ms),
    }
