"""One ``format("s2")`` read task without Spark: `S2BatchReader.read` of a range of JSON records.

    python -m benchmarks.read_path [--rows 400000] [--profile cprofile|none] [--keep]

A lite server runs in its own process (its CPU is measured apart), started from its command line: this
process never imports ``s2_sink.lite``, whose import patches hyperframe, so its HTTP/2 client is a Spark
worker's. ``--rows`` records of the harness's
five columns (``id, ts, user, kind, payload``, about 150 JSON bytes, written by a ``df.write.format("s2")``
task beforehand) are read back as a read task reads them: ``s2.format=json`` with the table's schema, one
partition, every Arrow batch the task yields consumed (not handed to a JVM).

Reported: this process's CPU in microseconds per record, split into the task's thread (decoding, JSON,
Arrow batches) and the event loop's (HTTP/2, S2S deframing), the server's, and records/s. With
``--profile cprofile`` the task thread's top functions follow (the loop thread's work is only in its
totals; ``py-spy record --native`` sees both). The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import pstats
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa

from benchmarks._lite import LiteProcess, _cpu
from benchmarks.writer_path import _ROWS_SCHEMA, _datasource_writer, _rows
from s2_sink._read.partition import S2Partition
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink.datasource import S2DataSource

__all__ = ["main"]


async def _loop_cpu() -> float:
    return time.thread_time()


async def _call(fn: Callable[[], object]) -> None:
    fn()


@contextlib.contextmanager
def _lite_process() -> Iterator[LiteProcess]:
    """``python -m s2_sink.lite`` on a free port for the duration of the block."""
    cmd = [sys.executable, "-m", "s2_sink.lite", "--port", "0"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as proc:
        try:
            assert proc.stdout is not None
            endpoint = proc.stdout.readline().strip()  # printed once it accepts connections
            assert endpoint.startswith("http://"), endpoint
            yield LiteProcess(endpoint=endpoint, pid=proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def _written(lite: LiteProcess, rows: int) -> dict[str, str]:
    """The read options of a stream holding ``rows`` records of the harness's rows."""
    writer = _datasource_writer(lite, _ROWS_SCHEMA, upsert=False)
    for lo in range(0, rows, 100_000):
        writer.write(iter(_rows(min(100_000, rows - lo), 10_000)))
    cfg = writer._opts.spec.plan(0).cfg  # the basin the writer made
    return {
        "s2.basin": cfg.basin,
        "s2.stream": "w",
        "s2.auth-token": "bench",
        "s2.endpoints.account": lite.endpoint,
        "s2.endpoints.basin": lite.endpoint,
        "s2.format": "json",
    }


def _read(options: dict[str, str], rows: int) -> int:
    reader = S2DataSource(options).reader(_ROWS_SCHEMA)
    rows_read = 0
    for batch in reader.read(S2Partition([("w", 0, rows)])):
        assert isinstance(batch, pa.RecordBatch)
        rows_read += batch.num_rows
    return rows_read


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--profile", choices=("none", "cprofile"), default="none")
    parser.add_argument("--repeat", type=int, default=2, help="timed reads (the best is reported)")
    args = parser.parse_args(argv)
    n = args.rows
    out: dict[str, Any] = {"rows": n}
    try:
        with _lite_process() as lite:
            options = _written(lite, n)
            _read(options, 1000)  # warm up the client
            best: dict[str, Any] | None = None
            for _ in range(args.repeat):
                usage = resource.getrusage(resource.RUSAGE_SELF)
                loop, task = _runtime.run(_loop_cpu()), time.thread_time()
                server, wall = _cpu(lite.pid), time.perf_counter()
                assert _read(options, n) == n
                wall = time.perf_counter() - wall
                task, loop = time.thread_time() - task, _runtime.run(_loop_cpu()) - loop
                after = resource.getrusage(resource.RUSAGE_SELF)
                client = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
                run = {
                    "client_us_per_record": round(client / n * 1e6, 3),
                    "task_thread_us_per_record": round(task / n * 1e6, 3),
                    "loop_thread_us_per_record": round(loop / n * 1e6, 3),
                    "server_us_per_record": round((_cpu(lite.pid) - server) / n * 1e6, 3),
                    "records_per_s": round(n / wall),
                }
                print(run)
                if best is None or run["client_us_per_record"] < best["client_us_per_record"]:
                    best = run
            out["read"] = best
            if args.profile == "cprofile":
                task_profile, loop_profile = cProfile.Profile(), cProfile.Profile()
                _runtime.run(_call(loop_profile.enable))  # a profiler sees only the thread it starts on
                task_profile.runcall(_read, options, n)
                _runtime.run(_call(loop_profile.disable))
                for name, profile in (("task thread", task_profile), ("loop thread", loop_profile)):
                    print(f"--- {name}")
                    pstats.Stats(profile).sort_stats("tottime").print_stats(30)
    finally:
        _runtime.run(get_pool().close_all())
    assert "s2_sink.lite" not in sys.modules
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
