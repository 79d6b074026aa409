"""One task's write path without Spark: a record frame through `write_partition`.

    python -m benchmarks.writer_path [--rows 200000] [--batch 10000] [--headers [--flat]]
        [--exactly-once-tags]
    python -m benchmarks.writer_path --datasource [--rows 200000] [--batch 10000]
    python -m benchmarks.writer_path --counts ...
    python -m benchmarks.writer_path --streams 1000 [--profile] [--first]

A lite server runs in its own process (its CPU is measured apart). The frame holds ~100-byte JSON bodies
(with ``--headers``, ``@key``/``@action`` headers as the upsert encoder writes them; with ``--flat`` too, as
the ``_s2_key``/``_s2_action`` columns the upsert encoder writes for the writers) in Arrow batches of
``--batch`` rows, as ``mapInArrow`` hands them to a task (with ``--exactly-once-tags``, a chunk tag on every
append, as exactly-once writes it).

With ``--datasource``, the rows are the harness's five columns (``id, ts, user, kind, payload``, about 150
JSON bytes) and the two measurements are a ``df.write.format("s2")`` task (`S2BatchWriter.write`: the
insert encoder on each batch, then `write_partition`; an ``S2Writer`` task does the same) and ``frame``,
`write_partition` of the frame that encoder makes, encoded before the clock starts: their difference is what
encoding costs a task.

Reported per path: this process's CPU (the Python worker's share: frame input, chunking, encoding,
session I/O), split into the task's thread (frame input, chunking, serializing) and the event loop's
(sessions, HTTP/2, acks), and the server's, in microseconds per record, and wall-clock records/s. The last
line of output is one JSON object.

Each path also reports the process's peak RSS and the most file descriptors and HTTP/2 streams it had
open during the write (sampled every 20 ms): with very many streams, what stays bounded.

With ``--streams N``, the rows are routed (row i to stream ``s<i mod N>``, as ``stream_column`` routes
them), so one task appends to N streams; ``--profile`` prints the cProfile of the task's thread and of
the event loop's thread (top functions by cumulative time, each thread's own CPU time); ``--by-stream
sorted`` orders the rows by stream (as the writer's split by stream does), ``told`` also tells the task so
(`WritePlan.rows_by_stream`, as the writer does when it sorts); ``--first`` measures the streams' first write
(which creates them, as a routed job's first micro-batch does) instead of a later one.

With ``--counts``, each path also reports, per 1000 records, the event loop's callbacks and iterations,
the task thread's hops to the loop and the HTTP/2 sender's writes: counts that do not move with the load
of a shared machine (CPU times do), to compare two versions of the write path (the counting itself costs
some CPU, so compare times without it).
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.events
import collections
import cProfile
import hashlib
import json
import os
import pstats
import resource
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType
from s2_sdk._client import Connection

from benchmarks._lite import LiteProcess, _cpu, lite_process
from benchmarks.append_proto import _frame
from s2_sink._exactly_once.epoch_plan import epoch_plan
from s2_sink._transport import runtime as _runtime
from s2_sink._transport import sdk
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.routing import STREAM_COLUMN
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.datasource import S2DataSource
from s2_sink.datasource._spark_writers import S2BatchWriter
from s2_sink.encoders._frame import ACTION, BODY, HEADERS, KEY
from s2_sink.testing import fresh_basin

__all__ = ["main"]


def _batches(
    rows: int,
    batch: int,
    with_headers: bool,
    flat: bool = False,
    streams: int = 0,
    *,
    by_stream: bool = False,
) -> list[pa.RecordBatch]:
    body, headers = _frame(rows, with_headers=with_headers)
    columns: dict[str, pa.Array] = {BODY: body}
    if streams:
        slot = (lambda i: i * streams // rows) if by_stream else (lambda i: i % streams)
        columns[STREAM_COLUMN] = pa.array([f"s{slot(i):06d}" for i in range(rows)])
    if headers is not None and flat:  # the changelog's flat form, as the writers encode it
        values = headers.flatten().field("value")
        columns |= {KEY: values[0::2], ACTION: values[1::2]}
    elif headers is not None:
        columns[HEADERS] = headers
    table = pa.table(columns)
    return [b for lo in range(0, rows, batch) for b in table.slice(lo, batch).to_batches()]


_KINDS = ("view", "click", "purchase", "refund", "search")
_ROWS_SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("ts", TimestampType()),
        StructField("user", StringType()),
        StructField("kind", StringType()),
        StructField("payload", StringType()),
    ]
)


_WIDE_SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("user_id", LongType()),
        StructField("source", StringType()),
        StructField("ts", TimestampType()),
        StructField("digest", StringType()),
    ]
)


def _rows(rows: int, batch: int, data: str = "events") -> list[pa.RecordBatch]:
    """The harness's rows (`benchmarks._data.shape`, or `.wide`), in Arrow as Spark hands them to a task."""
    ids = range(rows)
    if data == "wide":
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "user_id": pa.array([i % 100_000 for i in ids], pa.int64()),
                "source": ["web-checkout"] * rows,
                "ts": pa.array([1_700_000_000_000_000 + i * 1013 for i in ids], pa.timestamp("us", tz="UTC")),
                "digest": [hashlib.sha256(str(i).encode()).hexdigest() for i in ids],
            }
        )
        return table.to_batches(batch)  # type: ignore[no-any-return]
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "ts": pa.array([1_700_000_000_000_000 + i * 1000 for i in ids], pa.timestamp("us", tz="UTC")),
            "user": [f"user-{i % 100_000:06d}" for i in ids],
            "kind": [_KINDS[i % len(_KINDS)] for i in ids],
            "payload": [
                hashlib.md5(str(i).encode()).hexdigest() + hashlib.sha1(str(i).encode()).hexdigest()[:23]
                for i in ids
            ],
        }
    )
    batches: list[pa.RecordBatch] = table.to_batches(batch)
    return batches


async def _loop_cpu() -> float:
    return time.thread_time()


_COUNTS: collections.Counter[str] = collections.Counter()
"""Events counted once `_count_events` ran (empty otherwise); `_timed` reports them."""


def _count_events() -> None:
    """Count loop callbacks and iterations, hops to the loop and sender writes, from now on."""
    counts = _COUNTS
    handle_run = asyncio.events.Handle._run

    def run_handle(self: asyncio.events.Handle) -> None:
        counts["loop_callbacks"] += 1
        handle_run(self)

    asyncio.events.Handle._run = run_handle  # type: ignore[method-assign]
    loop = _runtime.get_loop()
    run_once = loop._run_once  # type: ignore[attr-defined]

    def iterate() -> None:
        counts["loop_iterations"] += 1
        run_once()

    loop._run_once = iterate  # type: ignore[attr-defined]
    hop = _runtime.run

    def counted_hop(coro: Any, timeout: float | None = None) -> Any:
        counts["task_hops"] += 1
        return hop(coro, timeout)

    _runtime.run = counted_hop
    send_data = Connection.send_data

    async def counted_send(self: Connection, *args: Any, **kwargs: Any) -> None:
        counts["sender_writes"] += 1
        await send_data(self, *args, **kwargs)

    Connection.send_data = counted_send  # type: ignore[method-assign]


class _Peaks:
    """The most file descriptors and HTTP/2 streams this process had open during a write, sampled every
    20 ms (the streams on the event loop's thread: h2 drops closed streams while it counts open ones)."""

    def __init__(self) -> None:
        self.fds = self.h2_streams = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> _Peaks:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        loop = _runtime.get_loop()
        while not self._stop.wait(0.02):
            self.fds = max(self.fds, len(os.listdir("/proc/self/fd")))
            loop.call_soon_threadsafe(self._count_streams)

    def _count_streams(self) -> None:
        streams = 0
        for entry in list(get_pool()._clients.values()):
            for transport in list(entry.client._basin_clients.values()):
                for conn in sdk.pooled_connections(transport):
                    state = sdk.h2_state(conn)
                    streams += state.open_outbound_streams if state is not None else 0
        self.h2_streams = max(self.h2_streams, streams)


def _timed(write: Callable[[], object], n: int, lite: LiteProcess) -> dict[str, Any]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    loop, task = _runtime.run(_loop_cpu()), time.thread_time()
    _COUNTS.clear()
    server, wall = _cpu(lite.pid), time.perf_counter()
    with _Peaks() as peaks:
        write()
    wall = time.perf_counter() - wall
    counted = {f"{k}_per_1000": round(v * 1000 / n, 2) for k, v in sorted(_COUNTS.items())}
    task, loop = time.thread_time() - task, _runtime.run(_loop_cpu()) - loop
    after = resource.getrusage(resource.RUSAGE_SELF)
    server = _cpu(lite.pid) - server
    client = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
    return {
        **counted,
        "client_us_per_record": round(client / n * 1e6, 3),
        "task_thread_us_per_record": round(task / n * 1e6, 3),
        "loop_thread_us_per_record": round(loop / n * 1e6, 3),
        "server_us_per_record": round(server / n * 1e6, 3),
        "records_per_s": round(n / wall),
        "peak_rss_mib": round(after.ru_maxrss / 1024),
        "max_open_fds": peaks.fds,
        "max_open_h2_streams": peaks.h2_streams,
    }


def _config(lite: LiteProcess) -> S2Config:
    return S2Config(
        basin=fresh_basin(lite.endpoint, token="bench"),
        stream="w",
        access_token="bench",
        account_endpoint=lite.endpoint,
        basin_endpoint=lite.endpoint,
    )


def _measure(
    lite: LiteProcess,
    batches: list[pa.RecordBatch],
    *,
    tags: bool,
    routed: bool,
    profile: bool,
    first: bool = False,
    by_stream: bool = False,
) -> dict[str, Any]:
    plan = WritePlan(
        cfg=_config(lite).replace(create_streams=True),
        batch_id=0,
        stream=None if routed else "w",
        stream_column=STREAM_COLUMN if routed else None,
        chunk_tagger=epoch_plan(_config(lite), "bench", 1, {}, recovery=False, writer_id="w").tagger
        if tags
        else None,
        chunk_tag_reserve=256 if tags else 0,
        rows_by_stream=by_stream,
    )
    n = sum(b.num_rows for b in batches)
    if first:  # the streams' first write: it creates them
        return _timed(lambda: write_partition(plan, batches, PartitionContext(0, 0, 0, 0, 0)), n, lite)
    # Warm up the client, and create the streams (a first micro-batch does; later ones find them).
    write_partition(plan, batches, PartitionContext(0, 0, 0, 0, 0))
    if not profile:
        return _timed(lambda: write_partition(plan, batches, PartitionContext(1, 0, 0, 0, 0)), n, lite)
    # Each thread's own CPU time, not wall time: a thread waiting (for the GIL, a lock, the socket) is
    # not charged for it.
    task_prof, loop_prof = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)

    async def on_loop(enable: bool) -> None:
        loop_prof.enable() if enable else loop_prof.disable()

    _runtime.run(on_loop(True))
    task_prof.enable()
    out = _timed(lambda: write_partition(plan, batches, PartitionContext(1, 0, 0, 0, 0)), n, lite)
    task_prof.disable()
    _runtime.run(on_loop(False))
    for name, prof in (("task thread", task_prof), ("event loop thread", loop_prof)):
        print(f"--- {name}: cumulative ---")
        pstats.Stats(prof).sort_stats("cumulative").print_stats(60)
        print(f"--- {name}: own time ---")
        pstats.Stats(prof).sort_stats("tottime").print_stats(40)
    return out


def _datasource_writer(lite: LiteProcess, schema: StructType, upsert: bool) -> S2BatchWriter:
    cfg = _config(lite)
    options = {
        "s2.basin": cfg.basin,
        "s2.stream": "w",
        "s2.auth-token": "bench",
        "s2.endpoints.account": lite.endpoint,
        "s2.endpoints.basin": lite.endpoint,
    }
    if upsert:
        options |= {"s2.format": "upsert", "s2.key-columns": "id"}
    writer = S2DataSource(options).writer(schema, overwrite=False)
    assert isinstance(writer, S2BatchWriter)
    return writer


def _measure_datasource(
    lite: LiteProcess, rows: list[pa.RecordBatch], schema: StructType, upsert: bool
) -> dict[str, dict[str, Any]]:
    """A data source task on `rows`, and `write_partition` of the frames its encoding makes of them."""
    writer = _datasource_writer(lite, schema, upsert)
    writer.write(iter(rows[:1]))  # warm up the client and the encoder
    n = sum(b.num_rows for b in rows)
    out = {"datasource": _timed(lambda: writer.write(iter(rows)), n, lite)}
    opts = writer._opts  # the same encoding and plan as the task
    frame = list(opts.encoding(schema).frames(rows))
    plan = opts.spec.plan(0)
    out["frame"] = _timed(lambda: write_partition(plan, frame, PartitionContext(1, 0, 0, 0, 0)), n, lite)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=10_000, help="rows per Arrow batch")
    parser.add_argument("--headers", action="store_true", help="two headers per record (@key, @action)")
    parser.add_argument(
        "--flat", action="store_true", help="with --headers: as _s2_key/_s2_action columns (S2Writer's form)"
    )
    parser.add_argument("--exactly-once-tags", action="store_true", help="tag every append")
    parser.add_argument(
        "--datasource",
        action="store_true",
        help='a format("s2") task on five raw columns vs write_partition of their encoded frame',
    )
    parser.add_argument(
        "--data",
        choices=("events", "wide"),
        default="events",
        help="with --datasource: the harness's rows (events) or the wide ones (benchmarks._data.wide)",
    )
    parser.add_argument("--upsert", action="store_true", help="with --datasource: the upsert encoder, key id")
    parser.add_argument("--streams", type=int, default=0, help="route the rows over this many streams")
    parser.add_argument(
        "--by-stream",
        choices=("no", "sorted", "told"),
        default="no",
        help="with --streams: rows interleaved (no), ordered by stream (sorted), and the task told so (told)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the task and event loop threads")
    parser.add_argument(
        "--first", action="store_true", help="measure the streams' first write (which creates them)"
    )
    parser.add_argument(
        "--counts",
        action="store_true",
        help="also count loop callbacks, hops and sender writes per 1000 records",
    )
    args = parser.parse_args(argv)
    if args.counts:
        _count_events()
    out: dict[str, Any] = {"rows": args.rows, "batch": args.batch, "headers": args.headers}
    try:
        with lite_process() as lite:
            if args.datasource:
                schema = _WIDE_SCHEMA if args.data == "wide" else _ROWS_SCHEMA
                rows = _rows(args.rows, args.batch, args.data)
                out.update(_measure_datasource(lite, rows, schema, args.upsert))
                for name in ("datasource", "frame"):
                    print(f"{name:>10}: {out[name]}")
            else:
                sorted_rows = args.by_stream != "no"
                batches = _batches(
                    args.rows, args.batch, args.headers, args.flat, args.streams, by_stream=sorted_rows
                )
                out["bulk"] = _measure(
                    lite,
                    batches,
                    tags=args.exactly_once_tags,
                    routed=args.streams > 0,
                    profile=args.profile,
                    first=args.first,
                    by_stream=args.by_stream == "told",
                )
                print(f"   bulk: {out['bulk']}")
    finally:
        _runtime.run(get_pool().close_all())
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
