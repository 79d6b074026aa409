"""``df.writeStream.format("s2")``: exactly-once against at-least-once, side by side.

A Python streaming sink cannot share a query with other sinks, so each delivery mode gets its own streaming
query over the same source: Spark's ``rate-micro-batch`` (exactly ``rows_per_batch`` rows per micro-batch,
two partitions), shaped into the benchmark's 5 columns. The queries run in ABBA order (at-least-once,
exactly-once, exactly-once, at-least-once) so a drifting machine load evens out, and each mode keeps its
faster round. Per micro-batch, Spark's own ``durationMs.addBatch`` is the sink's time (the Python tasks,
the driver's writer pickling, and the commit); the first ``warmup`` batches are discarded.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from typing import TYPE_CHECKING, Any

from benchmarks import _s2
from benchmarks._data import micro_batches

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["MODES", "format_sink"]

MODES = ("at-least-once", "exactly-once")


def _round(
    spark: SparkSession,
    endpoint: str,
    basin: str,
    delivery: str,
    *,
    rows_per_batch: int,
    batches: int,
    tmp: str,
) -> list[float]:
    """addBatch milliseconds of `batches` micro-batches written with `delivery`, in batch order."""
    stream = f"fmt-{delivery[:5]}-{uuid.uuid4().hex[:8]}"
    _s2.ensure(endpoint, basin, [stream])
    query = (
        micro_batches(spark, rows_per_batch, partitions=2)
        .writeStream.format("s2")
        .option("s2.basin", basin)
        .option("s2.stream", stream)
        .option("s2.endpoints.account", endpoint)
        .option("s2.endpoints.basin", endpoint)
        .option("s2.delivery", delivery)
        .option("checkpointLocation", tempfile.mkdtemp(prefix="ckpt-", dir=tmp))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 600
        while query.isActive and time.monotonic() < deadline:
            progress = query.lastProgress
            if progress is not None and progress["batchId"] >= batches - 1:
                break
            time.sleep(0.2)
        done = [p for p in query.recentProgress if p["numInputRows"] > 0]
    finally:
        query.stop()
    if len(done) < batches:
        raise RuntimeError(f"{delivery}: {len(done)} of {batches} micro-batches ran ({query.exception()})")
    return [float(p["durationMs"]["addBatch"]) for p in done[:batches]]


def format_sink(
    spark: SparkSession,
    endpoint: str,
    basin: str,
    *,
    rows_per_batch: int,
    batches: int,
    warmup: int,
    tmp: str,
    abba: bool = True,
) -> dict[str, Any]:
    """Per mode: median and mean addBatch ms over the measured batches of its faster round; and the ratios.
    ``abba=False`` runs each mode once (the quick run)."""
    rounds: dict[str, list[list[float]]] = {m: [] for m in MODES}
    for delivery in (*MODES, *reversed(MODES)) if abba else MODES:
        ms = _round(
            spark, endpoint, basin, delivery, rows_per_batch=rows_per_batch, batches=warmup + batches, tmp=tmp
        )[warmup:]
        rounds[delivery].append(ms)
    out: dict[str, Any] = {"rows_per_batch": rows_per_batch, "batches": batches, "modes": {}}
    for delivery, samples in rounds.items():
        best = min(samples, key=statistics.median)
        out["modes"][delivery] = {
            "median_ms": statistics.median(best),
            "mean_ms": statistics.fmean(best),
            "rounds_median_ms": [statistics.median(s) for s in samples],
        }
    alo, eo = (out["modes"][m]["median_ms"] for m in MODES)
    out["eo_over_alo_ms"] = eo - alo
    out["eo_vs_alo_ratio"] = eo / alo
    return out
