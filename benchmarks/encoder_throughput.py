"""Encoder throughput: rows/s of a 5-column, ~150-byte row through each encoding path.

    python -m benchmarks.encoder_throughput [--rows 2000000] [--arrow-rows 500000] [--partitions 2]

Paths measured (one line each, JSON on the last line of output):

- ``jvm_tojson_noop``: Spark's own ``to_json(struct(*))`` then ``write.format("noop")`` (the JVM's JSON
  encoding, for reference: the writers encode with the Arrow encoders below, in their Python tasks);
- ``jvm_baseline_noop``: the input alone through ``noop`` (what the data generation costs);
- ``arrow_insert`` / ``arrow_upsert``: ``encode_arrow`` over in-memory Arrow batches in this process (1 core).

The JVM numbers are for ``--partitions`` cores; divide by it for a per-core figure. The Arrow numbers are
rows per second of this process's CPU time, so that other work on a shared machine does not count.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections.abc import Callable

import pyarrow as pa

from s2_sink.encoders import InsertEncoder, UpsertEncoder

__all__ = ["main"]

# id, a ~95-character string, a double, a timestamp and a short category: ~150 bytes of JSON per row
_ROW_SQL = """
select id,
       concat('user-', cast(id % 100000 as string), '-', repeat('x', 80)) as name,
       cast(id as double) / 7 as score,
       timestamp_seconds(1700000000 + id) as ts,
       concat('cat', cast(id % 10 as string)) as category
from range(0, {rows}, 1, {partitions})
"""


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _cpu_timed(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def _jvm(rows: int, partitions: int) -> dict[str, float]:
    from pyspark.sql import SparkSession  # only this measurement needs a session (and a JVM)

    spark = (
        SparkSession.builder.master(f"local[{partitions}]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.sql(_ROW_SQL.format(rows=rows, partitions=partitions))
    from pyspark.sql import functions as F

    tojson = df.select(F.to_json(F.struct(*df.columns)).alias("body"))
    body_len = tojson.limit(1000).selectExpr("avg(length(body))").first()
    cases: dict[str, Callable[[], None]] = {
        "jvm_baseline_noop": lambda: df.write.format("noop").mode("overwrite").save(),
        "jvm_tojson_noop": lambda: tojson.write.format("noop").mode("overwrite").save(),
    }
    out: dict[str, float] = {"avg_body_bytes": float(body_len[0]) if body_len else 0.0}
    for name, fn in cases.items():
        fn()  # warm-up: JIT and codegen
        out[name] = rows / min(_timed(fn) for _ in range(2))
    spark.stop()
    return out


def _arrow_batch(rows: int) -> pa.RecordBatch:
    ids = list(range(rows))
    return pa.RecordBatch.from_pydict(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"user-{i % 100000}-" + "x" * 80 for i in ids]),
            "score": pa.array([i / 7 for i in ids], pa.float64()),
            "ts": pa.array(
                [dt.datetime(2023, 11, 14, tzinfo=dt.UTC) + dt.timedelta(seconds=i) for i in ids],
                pa.timestamp("us", "UTC"),
            ),
            "category": pa.array([f"cat{i % 10}" for i in ids]),
        }
    )


def _arrow(rows: int, batch_rows: int = 10_000) -> dict[str, float]:
    batch = _arrow_batch(batch_rows)
    repeats = max(1, rows // batch_rows)
    out: dict[str, float] = {}
    for name, enc in (("arrow_insert", InsertEncoder()), ("arrow_upsert", UpsertEncoder(["id"]))):
        enc.encode_arrow(batch)
        elapsed = _cpu_timed(lambda enc=enc: [enc.encode_arrow(batch) for _ in range(repeats)])  # type: ignore[misc]
        out[name] = repeats * batch_rows / elapsed
    # the same row without the double column (the costliest text: shortest digits, then Java's layout)
    no_float = batch.drop_columns(["score"])
    enc = InsertEncoder()
    elapsed = _cpu_timed(lambda: [enc.encode_arrow(no_float) for _ in range(repeats)])
    out["arrow_insert_no_double"] = repeats * batch_rows / elapsed
    return out


def main(argv: list[str] | None = None) -> int:
    """Measure and print rows/s per path; the last line is one JSON object."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000_000, help="rows through Spark per measurement")
    parser.add_argument("--arrow-rows", type=int, default=500_000, help="rows through encode_arrow")
    parser.add_argument("--partitions", type=int, default=2, help="Spark local cores / partitions")
    parser.add_argument("--skip-spark", action="store_true", help="measure only the Arrow path")
    args = parser.parse_args(argv)
    results = _arrow(args.arrow_rows)
    if not args.skip_spark:
        results |= _jvm(args.rows, args.partitions)
        results["partitions"] = args.partitions
    for name, value in results.items():
        sys.stdout.write(f"{name:>24}: {value:,.0f}\n")
    sys.stdout.write(json.dumps(results) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
