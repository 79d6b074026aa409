"""What Spark's shapes cost the writer (the ``shape`` section of ``benchmarks.run``).

- ``aggregation``: ``groupBy(k).agg(...)`` in update mode over 200 shuffle (state) partitions, the same
  streaming query into Spark's ``noop`` sink and into ``foreachBatch(S2Writer(cfg, UpsertEncoder(["k"])))``
  (exactly-once); each query's micro-batch wall times from its progress (``triggerExecution``), the two
  queries alternating in rounds so a drifting machine load hits both. Target: median ratio <= 1.3.
- ``partitions``: the same 200k cached rows written by ``S2Writer`` (exactly-once, task path forced: the
  driver path would hide what this measures) from 256 partitions and from 2, alternating after an untimed
  round; the fastest of the rounds each. Target: ratio <= 1.5.

- ``restart``: a scheduled ``availableNow`` job's restart with nothing in flight, and a real recovery, against
  its first run's batch (`benchmarks._restart`). Targets: <= 1.5 and <= 2.

The 1k-row micro-batch latency (target <= 30 ms beyond noop) is the ``streaming`` section's ``s2writer_eo``.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from typing import TYPE_CHECKING, Any

from benchmarks import _s2
from benchmarks._cases import _config, _encoder
from benchmarks._data import dataset
from benchmarks._restart import restarts

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from benchmarks._cases import Ctx

__all__ = ["production_shape"]

AGG_TARGET = 1.3
PARTITIONS_TARGET = 1.5

FULL = {"state_partitions": 200, "agg_batches": 6, "agg_rounds": 2, "rows": 200_000, "many": 256, "rounds": 3}
# Quick mode (a check that every measurement runs end to end, its numbers no guide): the same queries on
# fewer state and input partitions. Each state partition is a state store committing a file per batch, which
# made the aggregation alone several minutes of a loaded machine at 200.
QUICK = {"state_partitions": 8, "agg_batches": 2, "agg_rounds": 1, "rows": 20_000, "many": 16, "rounds": 1}


def _agg_query(spark: SparkSession, rows: int, keys: int) -> DataFrame:
    from pyspark.sql import functions as F

    src = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", 2)
        .load()
    )
    return (
        src.withColumn("k", (F.col("value") % keys).cast("string"))
        .groupBy("k")
        .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
    )


def _run_query(spark: SparkSession, sink: Any, batches: int, tmp: str, state_partitions: int) -> list[float]:
    """Micro-batch wall times (s) of one update-mode aggregation query run for `batches` batches."""
    # The state store keeps the shuffle partitions in the checkpoint.
    spark.conf.set("spark.sql.shuffle.partitions", str(state_partitions))
    try:
        df = _agg_query(spark, rows=2000, keys=600)
        writer = df.writeStream.outputMode("update")
        writer = writer.format("noop") if sink is None else writer.foreachBatch(sink)
        query = (
            writer.option("checkpointLocation", tempfile.mkdtemp(prefix="ckpt-agg-", dir=tmp))
            .trigger(processingTime="0 seconds")
            .start()
        )
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline and query.isActive:
            done = [p for p in query.recentProgress if p["numInputRows"] > 0]
            if len(done) >= batches + 1:
                break
            time.sleep(0.2)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    done = [p for p in query.recentProgress if p["numInputRows"] > 0]
    # The first batch pays planning, state store creation and worker start-up: left out.
    return [p["durationMs"]["triggerExecution"] / 1000 for p in done[1 : batches + 1]]


def _aggregation(
    spark: SparkSession, ctx: Ctx, batches: int, rounds: int, state_partitions: int
) -> dict[str, Any]:
    from s2_sink.writer import S2Writer

    times: dict[str, list[float]] = {"noop": [], "s2writer_upsert_eo": []}
    tasks: list[int] = []
    for r in range(rounds):
        order = ["noop", "s2writer_upsert_eo"] if r % 2 == 0 else ["s2writer_upsert_eo", "noop"]
        for name in order:
            sink = None
            if name != "noop":
                cfg = _config(ctx, f"agg-{uuid.uuid4().hex[:8]}")
                upsert = type(_encoder("upsert"))(["k"])
                sink = S2Writer(cfg, upsert, writer_id=f"bench-agg-{uuid.uuid4().hex[:8]}")
                sink = _Recorder(sink, tasks)
            times[name].extend(_run_query(spark, sink, batches, ctx.tmp, state_partitions))
    noop, s2 = statistics.median(times["noop"]), statistics.median(times["s2writer_upsert_eo"])
    return {
        "label": f"update-mode aggregation over {state_partitions} state partitions, 600 keys/batch, "
        "UpsertEncoder exactly-once vs the same query into noop",
        "state_partitions": state_partitions,
        "noop_median_ms": noop * 1000,
        "s2writer_median_ms": s2 * 1000,
        "batches": len(times["noop"]),
        "write_tasks": sorted(set(tasks)),
        "ratio": s2 / noop,
        "target": AGG_TARGET,
        "met": s2 / noop <= AGG_TARGET,
    }


class _Recorder:
    """Passes each micro-batch on to the writer and keeps its task count (``BatchMetrics.partitions``)."""

    def __init__(self, writer: Any, tasks: list[int]) -> None:
        self.writer, self.tasks = writer, tasks

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.writer(df, batch_id)
        if self.writer.last_metrics is not None:
            self.tasks.append(self.writer.last_metrics.partitions)


def _partitions(spark: SparkSession, ctx: Ctx, rows: int, many: int, rounds: int) -> dict[str, Any]:
    from s2_sink.writer import S2Writer

    frames = {n: dataset(spark, rows, n).cache() for n in (many, 2)}
    for df in frames.values():
        df.count()
    best: dict[int, float] = {}
    tasks: dict[int, int] = {}
    # An untimed round first: the first write of each layout pays JIT and worker start-up (a single timed
    # round, --quick, would charge them to whichever layout went first).
    for r in range(rounds + 1):
        for n in (many, 2) if r % 2 == 0 else (2, many):
            stream = f"parts-{n}-{uuid.uuid4().hex[:8]}"
            writer = S2Writer(
                _config(ctx, stream, driver_write_max_rows=0),
                _encoder("insert"),
                writer_id=f"bench-{stream}",
            )
            t0 = time.perf_counter()
            writer(frames[n], 0)
            took = time.perf_counter() - t0
            assert writer.last_metrics is not None
            assert writer.last_metrics.records == rows
            tasks[n] = writer.last_metrics.partitions
            if r > 0:
                best[n] = min(best.get(n, took), took)
    for df in frames.values():
        df.unpersist()
    return {
        "label": f"{rows:,} rows, S2Writer exactly-once (task path), {many} input partitions vs 2",
        "rows": rows,
        "input_partitions": many,
        f"s{many}_s": best[many],
        "s2_s": best[2],
        "write_tasks": {str(many): tasks[many], "2": tasks[2]},
        "ratio": best[many] / best[2],
        "target": PARTITIONS_TARGET,
        "met": best[many] / best[2] <= PARTITIONS_TARGET,
    }


def production_shape(spark: SparkSession, ctx: Ctx, *, quick: bool) -> dict[str, Any]:
    """The three measurements (see module docstring); an error is reported, never a made-up number."""
    out: dict[str, Any] = {}
    size = QUICK if quick else FULL
    _s2.ensure(ctx.endpoint, ctx.basin, [])
    for key, run in (
        (
            "aggregation",
            lambda: _aggregation(
                spark, ctx, size["agg_batches"], size["agg_rounds"], size["state_partitions"]
            ),
        ),
        ("partitions", lambda: _partitions(spark, ctx, size["rows"], size["many"], size["rounds"])),
        ("restart", lambda: restarts(spark, ctx, rounds=size["rounds"])),
    ):
        try:
            out[key] = {"status": "ok", **run()}
        except Exception as exc:
            out[key] = {"status": "error", "reason": f"{type(exc).__name__}: {str(exc).strip()[:300]}"}
    return out
