"""A ``format("s2")`` batch read of many small streams without Spark, against the same records in one stream.

    python -m benchmarks.read_many_path [--streams 1000] [--records-per-stream 100] [--repeat 2]

A lite server runs in its own process (its CPU is apart). The records (about 120 JSON bytes each) are
appended with the SDK to ``--streams`` streams under a prefix and, as many again, to one stream. Each read is
what Spark runs for ``spark.read.format("s2")``: the planning (``S2BatchReader.partitions``: the listing and
the tails) and every partition's ``read`` into Arrow batches of the raw format, consumed here. Reported per
read: partitions, this process's CPU in microseconds per record (planning and reading), wall time; the best
of ``--repeat``, one stream and many alternating. The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from typing import Any

import s2_sdk

from benchmarks.read_path import _lite_process
from s2_sink._read.rows.schemas import RAW_SCHEMA
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink.datasource import S2DataSource

__all__ = ["main"]

_BASIN = "read-many-path"


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _fill(endpoint: str, streams: int, per_stream: int) -> None:
    def body(i: int) -> bytes:
        return json.dumps({"id": i, "user": f"user-{i % 100_000:06d}", "payload": f"{i:064x}"}).encode()

    async def go() -> None:
        async with s2_sdk.S2("bench", endpoints=s2_sdk.Endpoints(account=endpoint, basin=endpoint)) as s2:
            await s2.create_basin(_BASIN, config=s2_sdk.BasinConfig(create_stream_on_append=True))
            basin = s2.basin(_BASIN)
            gate = asyncio.Semaphore(32)

            async def append(stream: str, n: int) -> None:
                async with gate:
                    for lo in range(0, n, 1000):
                        records = [s2_sdk.Record(body=body(i)) for i in range(lo, min(n, lo + 1000))]
                        await basin.stream(stream).append(s2_sdk.AppendInput(records=records))

            names = [f"m/{i:06d}" for i in range(streams)]
            await asyncio.gather(*(append(s, per_stream) for s in names), append("one", streams * per_stream))

    asyncio.run(go())


def _read(options: dict[str, str]) -> dict[str, Any]:
    reader = S2DataSource(options).reader(RAW_SCHEMA)
    cpu, wall = _cpu(), time.perf_counter()
    partitions = reader.partitions()
    planned = _cpu()
    records = sum(batch.num_rows for p in partitions for batch in reader.read(p))
    done, wall = _cpu(), time.perf_counter() - wall
    return {
        "partitions": len(partitions),
        "records": records,
        "plan_cpu_s": round(planned - cpu, 3),
        "client_us_per_record": round((done - cpu) / records * 1e6, 2),
        "wall_s": round(wall, 2),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--records-per-stream", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"streams": args.streams, "records_per_stream": args.records_per_stream}
    try:
        with _lite_process() as lite:
            _fill(lite.endpoint, args.streams, args.records_per_stream)
            base = {
                "s2.basin": _BASIN,
                "s2.endpoints.account": lite.endpoint,
                "s2.endpoints.basin": lite.endpoint,
            }
            readers = {"one": {**base, "s2.stream": "one"}, "many": {**base, "s2.stream-prefix": "m/"}}
            _read(readers["one"])  # warm up the client
            for r in range(args.repeat):
                for key in readers if r % 2 == 0 else reversed(list(readers)):
                    run = _read(readers[key])
                    print(key, run)
                    if key not in out or run["client_us_per_record"] < out[key]["client_us_per_record"]:
                        out[key] = run
            out["ratio"] = round(out["many"]["client_us_per_record"] / out["one"]["client_us_per_record"], 2)
    finally:
        _runtime.run(get_pool().close_all())
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
