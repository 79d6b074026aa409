"""``make demo``: a streaming query into the embedded lite server through `S2Writer`, then read back.

A rate source's micro-batches through ``foreachBatch(S2Writer(...))``, then the stream read and summarised.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import orjson
from s2_sdk import S2, Endpoints

from s2_sink import BatchMetrics, S2Config
from s2_sink._exactly_once.readback import read_span
from s2_sink._pyspark import needs_pyspark
from s2_sink.testing import fresh_basin

STREAM = "demo/orders"


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m s2_sink.demo", description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=4, help="non-empty micro-batches to write (default 4)")
    p.add_argument("--rows-per-batch", type=int, default=50_000, help="rows per micro-batch (default 50000)")
    p.add_argument(
        "--delivery", choices=("exactly-once", "at-least-once"), default="exactly-once", help="delivery mode"
    )
    p.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    return p.parse_args(argv)


async def _read_back(endpoint: str, basin: str) -> tuple[int, list[bytes]]:
    async with S2("demo", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
        stream = s2.basin(basin).stream(STREAM)
        tail = (await stream.check_tail()).seq_num
        bodies = [r.body async for r in read_span(stream, 0, tail) if not r.is_command_record()]
    return len(bodies), bodies[:3]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; returns the process exit code."""
    args = _args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    with needs_pyspark("the demo"):
        from pyspark.sql import DataFrame, SparkSession  # noqa: PLC0415 - keep `--help` fast

    from s2_sink import S2Writer  # noqa: PLC0415
    from s2_sink.encoders import InsertEncoder  # noqa: PLC0415
    from s2_sink.lite import LiteServer  # noqa: PLC0415 - the sink proper does not import the server

    started = time.monotonic()
    with LiteServer(subprocess=True) as srv:  # its own process: no GIL shared with the driver
        basin = fresh_basin(srv.endpoint, name=None)
        print(f"lite server at {srv.endpoint}, basin {basin!r}, stream {STREAM!r}")
        local: dict[str, Any] = {"spark.ui.enabled": False, "spark.ui.showConsoleProgress": False}
        local |= {"spark.sql.shuffle.partitions": 2, "spark.driver.host": "127.0.0.1"}
        local |= {"spark.driver.bindAddress": "127.0.0.1"}
        spark = (
            SparkSession.builder.master("local[2]").appName("s2-sink-demo").config(map=local).getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        cfg = S2Config(
            basin=basin,
            stream=STREAM,
            access_token="demo",
            account_endpoint=srv.endpoint,
            basin_endpoint=srv.endpoint,
        )
        written: list[BatchMetrics] = []
        writer = S2Writer(cfg, InsertEncoder(), on_metrics=written.append, delivery=args.delivery)

        def sink(batch_df: DataFrame, batch_id: int) -> None:
            # Once enough batches are written, later ones are left alone so stopping never cuts one short.
            if len(written) < args.batches:
                writer(batch_df, batch_id)

        orders = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", args.rows_per_batch)
            .option("numPartitions", 2)
            .load()
            .selectExpr(
                "value AS order_id",
                "timestamp AS ts",
                "element_at(array('eu', 'us', 'ap'), CAST(value % 3 + 1 AS INT)) AS region",
                "value % 997 / 10 AS amount",
                "concat('customer-', CAST(value % 1000 AS STRING)) AS customer",
            )
        )
        query = (
            orders.writeStream.foreachBatch(sink)
            .option("checkpointLocation", tempfile.mkdtemp(prefix="s2-sink-demo-checkpoint-"))
            .start()
        )
        print(f"streaming query started ({writer.delivery}); writing {args.batches} micro-batches ...")
        deadline = time.monotonic() + args.timeout
        while len(written) < args.batches and time.monotonic() < deadline and query.exception() is None:
            time.sleep(0.2)
        query.stop()
        error = query.exception()
        spark.stop()
        if error is not None:
            print(f"the query failed: {error}")
            return 1
        count, sample = asyncio.run(_read_back(srv.endpoint, basin))
    records, rows, busy = (sum(getattr(m, k) for m in written) for k in ("records", "rows_in", "duration_s"))
    print(f"\nmicro-batches written : {len(written)}")
    print("".join(f"  {m.log_line()}\n" for m in written), end="")
    print(
        f"rows in / records out : {rows} / {records} ({rows / busy if busy else 0:,.0f} rows/s while writing)"
    )
    print(f"records read back     : {count}")
    print("first records         :")
    for body in sample:
        print(f"  {orjson.loads(body)}")
    print(f"total demo time       : {time.monotonic() - started:.1f}s")
    return 0 if count >= records > 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
