"""Many streams per micro-batch (the ``routed`` section of ``benchmarks.run``).

The same rows written by ``S2Writer`` into one stream and routed by a column (``stream_column``) to
``streams`` streams of ``rows_per_stream`` rows each, at-least-once and exactly-once: four writers, each
writing a first micro-batch untimed (it creates the streams and, exactly-once, opens the run and fences
them), then ``batches`` measured micro-batches of the same rows, the four writers alternating per round
(ABBA) so a drifting load hits all of them. Client CPU (Python + JVM) per row is summed over the measured
batches; wall time is their median. The task path is forced (``driver_write_max_rows=0``): the rows are
spread over the input's partitions, so with two write tasks each task appends to every stream. Each writer's
rows are cached, the routed ones with their routing column, as a job's rows would hold it.

Target (issue "many streams"): routed over one stream, client CPU per row <= 2x, both deliveries (<= 3x from
10,000 streams on).
Every writer's streams are read back: each holds its rows once per micro-batch (exactly-once: exactly).
"""

from __future__ import annotations

import statistics
import uuid
from typing import TYPE_CHECKING, Any

from benchmarks import _s2
from benchmarks._cases import _config, _encoder
from benchmarks._data import dataset

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from benchmarks._cases import Ctx
    from benchmarks._procs import ProcessMeter

__all__ = ["ROUTED_TARGET", "routed"]

ROUTED_TARGET = 2.0
MANY_STREAMS_TARGET = (10_000, 3.0)
"""From this many streams on, the target is this ratio instead."""
ROUTE = "tenant"

_WRITERS = (
    ("one", "at-least-once"),
    ("routed", "at-least-once"),
    ("one_eo", "exactly-once"),
    ("routed_eo", "exactly-once"),
)


def _writer(ctx: Ctx, key: str, delivery: str, prefix: str) -> Any:
    from s2_sink.writer import S2Writer

    routed = key.startswith("routed")
    cfg = _config(ctx, None if routed else prefix, driver_write_max_rows=0)
    kwargs: dict[str, Any] = {"delivery": delivery, "stream_column": ROUTE if routed else None}
    if delivery == "exactly-once":
        kwargs["writer_id"] = f"bench-{prefix}"
    return S2Writer(cfg, _encoder("insert"), **kwargs)


def _frame(base: DataFrame, key: str, prefix: str, streams: int) -> DataFrame:
    """The rows, routed to `prefix` + a zero-padded ``id mod streams`` (or the base rows, one stream)."""
    from pyspark.sql import functions as F

    if not key.startswith("routed"):
        return base
    slot = F.lpad((F.col("id") % streams).cast("string"), 6, "0")
    return base.withColumn(ROUTE, F.concat(F.lit(prefix), slot))


def routed(
    meter: ProcessMeter, ctx: Ctx, *, streams: int, rows_per_stream: int, batches: int
) -> dict[str, Any]:
    """The four writers' first-batch wall times, and per measured batch their wall times and CPU per row."""
    rows = streams * rows_per_stream
    base = dataset(ctx.spark, rows, 2).cache()
    base.count()
    prefixes = {key: f"r{i}-{uuid.uuid4().hex[:6]}-" for i, (key, _) in enumerate(_WRITERS)}
    deliveries = dict(_WRITERS)
    writers = {key: _writer(ctx, key, delivery, prefixes[key]) for key, delivery in _WRITERS}
    frames = {key: _frame(base, key, prefixes[key], streams).cache() for key, _ in _WRITERS}
    for frame in frames.values():
        frame.count()
    out: dict[str, dict[str, Any]] = {}
    usage: dict[str, list[Any]] = {key: [] for key in writers}
    try:
        for key, w in writers.items():  # the first batch: creates the streams (and opens the run)
            meter.start()
            w(frames[key], 0)
            u = meter.stop()
            out[key] = {"first_batch_s": u.wall_s, "first_batch_client_cpu_s": _client_s(u)}
        for r in range(batches):
            order = list(writers) if r % 2 == 0 else list(reversed(writers))
            for key in order:
                meter.start()
                writers[key](frames[key], r + 1)
                usage[key].append(meter.stop())
        for key, w in writers.items():
            us = usage[key]
            n = rows * len(us)
            out[key].update(
                {
                    "delivery": deliveries[key],
                    "streams": streams if key.startswith("routed") else 1,
                    "write_tasks": w.last_metrics.partitions if w.last_metrics else None,
                    "median_batch_s": statistics.median(u.wall_s for u in us),
                    "py_cpu_us_per_row": sum(u.worker_cpu_s + u.driver_cpu_s for u in us) / n * 1e6,
                    "jvm_cpu_us_per_row": sum(u.jvm_cpu_s for u in us) / n * 1e6,
                    "client_cpu_us_per_row": sum(_client_s(u) for u in us) / n * 1e6,
                    "lite_cpu_us_per_row": sum(u.lite_cpu_s for u in us) / n * 1e6,
                    "worker_peak_rss_mib": max(u.worker_peak_rss_mib for u in us),
                }
            )
        for key, _ in _WRITERS:
            out[key]["read_back"] = _read_back(ctx, key, prefixes[key], rows * (batches + 1))
    finally:
        for frame in (base, *frames.values()):
            frame.unpersist()
    result: dict[str, Any] = {
        "label": f"{rows:,} rows per micro-batch into 1 stream vs routed to {streams:,} streams "
        f"({rows_per_stream:,} rows each), S2Writer task path",
        "streams": streams,
        "rows_per_stream": rows_per_stream,
        "rows_per_batch": rows,
        "batches": batches,
        "writers": out,
        "target": MANY_STREAMS_TARGET[1] if streams >= MANY_STREAMS_TARGET[0] else ROUTED_TARGET,
    }
    for suffix in ("", "_eo"):
        one, many = out[f"one{suffix}"], out[f"routed{suffix}"]
        result[f"ratio{suffix}"] = many["client_cpu_us_per_row"] / one["client_cpu_us_per_row"]
        result[f"wall_ratio{suffix}"] = many["median_batch_s"] / one["median_batch_s"]
        # What a stream costs a micro-batch beyond its rows: the extra client CPU over the streams (each
        # touched by one task or by several, as the writer split the batch).
        extra = (many["client_cpu_us_per_row"] - one["client_cpu_us_per_row"]) * rows
        result[f"ms_per_stream{suffix}"] = extra / streams / 1000
    return result


def _client_s(u: Any) -> float:
    return float(u.worker_cpu_s + u.driver_cpu_s + u.jvm_cpu_s)


def _read_back(ctx: Ctx, key: str, prefix: str, expected: int) -> str:
    """The records the writer's streams hold; raises when a stream lost or (exactly-once) doubled rows."""
    names = [prefix] if not key.startswith("routed") else _s2.list_streams(ctx.endpoint, ctx.basin, prefix)
    held = _s2.data_records(ctx.endpoint, ctx.basin, names)
    exact = key.endswith("_eo")
    if held < expected or (exact and held != expected):
        raise RuntimeError(f"routed {key}: {len(names)} streams hold {held:,} records, expected {expected:,}")
    return f"{held:,} records in {len(names):,} streams"
