"""Happy-path cost of exactly-once vs at-least-once: ``python -m tests.faults.overhead [--rows N]``.

The same cached DataFrame is written by two `S2Writer`s (``delivery="exactly-once"`` with an explicit
``writer_id`` and ``"at-least-once"``) into two streams of one lite server, alternating, R rounds each, as
consecutive micro-batch ids (the way ``foreachBatch`` calls them). Prints rows/s per mode, the medians and
the ratio exactly-once / at-least-once. No faults: this is the happy path (no read-back; one ledger append
per micro-batch; one tag header per append).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from s2_sink.config import S2Config
from s2_sink.lite import LiteServer
from s2_sink.writer import S2Writer
from tests.faults._support import make_basin


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors need this venv's packages
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = (
        spark.range(args.rows, numPartitions=args.partitions)
        .select(
            F.col("id"),
            F.concat(F.lit("user-"), (F.col("id") % 1000).cast("string")).alias("user"),
            (F.col("id") * 7 % 10_000).alias("amount"),
            F.lit("some payload text of moderate length").alias("note"),
        )
        .cache()
    )
    df.count()
    with LiteServer(subprocess=True) as srv:
        basin = make_basin(srv.endpoint, ["eo", "alo"])

        def cfg(stream: str) -> S2Config:
            return S2Config(
                basin=basin,
                stream=stream,
                access_token="x",
                account_endpoint=srv.endpoint,
                basin_endpoint=srv.endpoint,
            )

        writers = {
            "exactly-once": S2Writer(cfg("eo"), delivery="exactly-once", writer_id="overhead-bench"),
            "at-least-once": S2Writer(cfg("alo"), delivery="at-least-once"),
        }
        for w in writers.values():  # warm up: workers, pooled sessions, the ledger's first read
            w(df.limit(1000), 0)
        times: dict[str, list[float]] = {k: [] for k in writers}
        for r in range(1, args.rounds + 1):
            order = list(writers) if r % 2 else list(reversed(writers))
            for name in order:
                t0 = time.perf_counter()
                writers[name](df, r)
                times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, ts in times.items():
        rates = ", ".join(f"{args.rows / t:,.0f}" for t in ts)
        print(f"{name:14s} rows/s per round: {rates}; median {args.rows / med[name]:,.0f} rows/s")
    ratio = med["at-least-once"] / med["exactly-once"]
    change = "less" if ratio < 1 else "more"
    print(
        f"throughput ratio exactly-once / at-least-once = {ratio:.3f} "
        f"(exactly-once moves {abs(1 - ratio) * 100:.1f}% {change} rows/s; noise included)"
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
