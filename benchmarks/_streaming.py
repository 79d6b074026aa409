"""Sink latency per micro-batch: one streaming query of fixed 1k-row batches through foreachBatch.

The source is Spark's ``rate-micro-batch`` (exactly ``rowsPerBatch`` rows per batch, whatever the wall
time), shaped into the benchmark's 5 columns. Every micro-batch is handed to each sink in turn (the order
rotates per batch so none always goes first) and each call is timed on the driver. The sinks thus see the
same batches under the same machine load, and "beyond noop" is the per-batch difference to a ``noop`` write
of the same batch: the latency the S2 sink adds to Spark's own per-batch job.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from benchmarks._data import micro_batches

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Sink", "latency", "summarize"]

Sink = Callable[["DataFrame", int], None]


def latency(
    spark: SparkSession,
    sinks: Mapping[str, Sink],
    *,
    batches: int,
    warmup: int,
    rows_per_batch: int,
    tmp: str,
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Seconds each sink spent on each of `batches` micro-batches (after `warmup` discarded ones), and the
    error of each sink that failed (a failed sink is left out of later batches)."""
    names = list(sinks)
    durations: dict[str, list[float]] = {n: [] for n in names}
    errors: dict[str, str] = {}
    seen = 0
    enough = threading.Event()

    def body(batch_df: DataFrame, batch_id: int) -> None:
        nonlocal seen
        if enough.is_set():
            return
        k = seen % len(names)
        for name in names[k:] + names[:k]:
            if name in errors:
                continue
            t0 = time.perf_counter()
            try:
                sinks[name](batch_df, batch_id)
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"
                continue
            if seen >= warmup:
                durations[name].append(time.perf_counter() - t0)
        seen += 1
        if seen >= warmup + batches:
            enough.set()

    query = (
        micro_batches(spark, rows_per_batch, partitions=1)
        .writeStream.foreachBatch(body)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="ckpt-", dir=tmp))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 900
        while not enough.wait(0.2):
            if not query.isActive or time.monotonic() > deadline:
                break
    finally:
        query.stop()
    if not enough.is_set():
        raise RuntimeError(f"streaming query stopped after {seen} batches: {query.exception()}")
    return durations, errors


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[idx]


def summarize(seconds: list[float]) -> dict[str, Any]:
    """Median, p99 and mean in milliseconds (p99 of few samples is their maximum, or close to it)."""
    ms = [s * 1000 for s in seconds]
    return {
        "status": "ok",
        "n": len(ms),
        "median_ms": statistics.median(ms),
        "p99_ms": _pct(ms, 0.99),
        "mean_ms": statistics.fmean(ms),
    }
