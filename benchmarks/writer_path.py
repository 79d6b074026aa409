"""One task's write path without Spark, bulk vs record path: a record frame through `write_partition`.

    python -m benchmarks.writer_path [--rows 200000] [--batch 10000] [--headers] [--exactly-once-tags]

A lite server runs in its own process (its CPU is measured apart). The frame holds ~100-byte JSON bodies
(with ``--headers``, ``@key``/``@action`` headers as the upsert encoder writes them) in Arrow batches of
``--batch`` rows, as ``mapInArrow`` hands them to a task; it is written with ``bulk_append=True`` and then
``False`` (with ``--exactly-once-tags``, a chunk tag on every append, as exactly-once writes it).

Reported per path: this process's CPU (the Python worker's share: frame input, chunking, encoding,
session I/O) and the server's, in microseconds per record, and wall-clock records/s. The last line of
output is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from typing import Any

import pyarrow as pa

from benchmarks._lite import LiteProcess, _cpu, lite_process
from benchmarks.append_proto import _frame
from s2_sink import _runtime
from s2_sink._exactly_once._task import Tagger
from s2_sink._partition_writer import write_partition
from s2_sink._session_pool import get_pool
from s2_sink._write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.encoders._frame import BODY, HEADERS
from s2_sink.testing import fresh_basin

__all__ = ["main"]


def _batches(rows: int, batch: int, with_headers: bool) -> list[pa.RecordBatch]:
    body, headers = _frame(rows, with_headers=with_headers)
    columns = {BODY: body} if headers is None else {BODY: body, HEADERS: headers}
    table = pa.table(columns)
    return [b for lo in range(0, rows, batch) for b in table.slice(lo, batch).to_batches()]


def _measure(lite: LiteProcess, batches: list[pa.RecordBatch], *, bulk: bool, tags: bool) -> dict[str, Any]:
    basin = fresh_basin(lite.endpoint, token="bench")
    cfg = S2Config(
        basin=basin,
        stream="w",
        access_token="bench",
        account_endpoint=lite.endpoint,
        basin_endpoint=lite.endpoint,
        bulk_append=bulk,
    )
    plan = WritePlan(
        cfg=cfg,
        batch_id=0,
        stream="w",
        chunk_tagger=Tagger("bench", 1) if tags else None,
        chunk_tag_reserve=256 if tags else 0,
    )
    write_partition(plan, [batches[0].slice(0, 10)], PartitionContext(0, 0, 0, 0, 0))  # warm up the client
    usage = resource.getrusage(resource.RUSAGE_SELF)
    server, wall = _cpu(lite.pid), time.perf_counter()
    write_partition(plan, batches, PartitionContext(1, 0, 0, 0, 0))
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_SELF)
    server = _cpu(lite.pid) - server
    client = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    n = sum(b.num_rows for b in batches)
    return {
        "client_us_per_record": round(client / n * 1e6, 3),
        "server_us_per_record": round(server / n * 1e6, 3),
        "records_per_s": round(n / wall),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000, help="rows per Arrow batch")
    parser.add_argument("--headers", action="store_true", help="two headers per record (@key, @action)")
    parser.add_argument("--exactly-once-tags", action="store_true", help="tag every append")
    args = parser.parse_args(argv)
    batches = _batches(args.rows, args.batch, args.headers)
    out: dict[str, Any] = {"rows": args.rows, "batch": args.batch, "headers": args.headers}
    try:
        with lite_process() as lite:
            for name, bulk in (("bulk", True), ("records", False)):
                out[name] = _measure(lite, batches, bulk=bulk, tags=args.exactly_once_tags)
                print(f"{name:>7}: {out[name]}")
    finally:
        _runtime.run(get_pool().close_all())
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
