"""Which modules of s2_sink one streaming read task passes through, from `S2StreamReader.read` to rows.

    python -m benchmarks.read_modules [--format raw|json|kafka|upsert] [--records 3000] [--list]

Not a timing: a count of the package's structure, the same on any machine. A lite server runs in its own
process; a few thousand records are appended with the SDK; ``spark.readStream.format("s2")``'s reader is
made by the data source (no Spark session needed: the Python Data Source classes are plain Python) and
plans one micro-batch. One partition is read untraced first (imports, connections), then the same partition
again under ``sys.setprofile`` (the task's thread and the event loop's).

Counted per thread: the module of the innermost s2_sink frame (outside ``s2_sink.lite``; other packages'
frames, the SDK's, asyncio's and Arrow's, are transparent), after every call and return; consecutive
repeats collapsed. ``modules``: the distinct modules over both threads. ``returns``: the steps of those
sequences back into a module the thread had already left (a module A calling B calling A again counts one).
The last line of output is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import s2_sdk

__all__ = ["main", "trace_modules"]

_PACKAGE = "s2_sink"
_LITE = "s2_sink.lite"


def _records(fmt: str, n: int) -> list[s2_sdk.Record]:
    out = []
    for i in range(n):
        body = json.dumps({"id": i, "name": f"n{i}"}).encode()
        if fmt == "upsert":
            key = json.dumps({"id": i % 97}).encode()
            out.append(s2_sdk.Record(body=body, headers=[(b"@key", key), (b"@action", b"u")]))
        elif fmt == "kafka":
            out.append(s2_sdk.Record(body=body, headers=[(b"@kafka-key", str(i).encode()), (b"h", b"v")]))
        else:
            out.append(s2_sdk.Record(body=body, headers=[(b"h", b"v")]))
    return out


def _append(endpoint: str, basin: str, stream: str, records: list[s2_sdk.Record]) -> None:
    async def go() -> None:
        endpoints = s2_sdk.Endpoints(account=endpoint, basin=endpoint)
        async with s2_sdk.S2("trace", endpoints=endpoints) as s2:
            for lo in range(0, len(records), 1000):
                await (
                    s2.basin(basin).stream(stream).append(s2_sdk.AppendInput(records=records[lo : lo + 1000]))
                )

    asyncio.run(go())


def trace_modules(read: Callable[[], object]) -> dict[str, Any]:
    """Run ``read()`` under the profiler of this thread and of the threads it starts or wakes (the shared
    event loop's thread must start after this is called, or already run under `threading.setprofile`)."""
    sequences: dict[int, list[str]] = {}

    def module_of(frame: FrameType | None) -> str | None:
        while frame is not None:
            name = frame.f_globals.get("__name__", "")
            if (name == _PACKAGE or name.startswith(_PACKAGE + ".")) and not name.startswith(_LITE):
                return str(name)
            frame = frame.f_back
        return None

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event not in ("call", "return"):
            return
        ident = threading.get_ident()
        # After a return the caller's frame is the current one.
        where = module_of(frame if event == "call" else frame.f_back)
        seq = sequences.setdefault(ident, [])
        if where is not None and (not seq or seq[-1] != where):
            seq.append(where)

    loop_thread = _loop_thread()
    threading.setprofile(profile)
    sys.setprofile(profile)
    if loop_thread is not None:
        _set_on_loop(profile)
    try:
        read()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        if loop_thread is not None:
            _set_on_loop(None)
    returns = 0
    for seq in sequences.values():
        seen: set[str] = set()
        for module in seq:
            if module in seen:
                returns += 1
            seen.add(module)
    modules = sorted({m for seq in sequences.values() for m in seq})
    return {"modules": len(modules), "returns": returns, "module_names": modules, "sequences": sequences}


def _loop_thread() -> threading.Thread | None:
    from s2_sink._transport import runtime

    runtime.get_loop()
    return next((t for t in threading.enumerate() if t.name == "s2-sink-loop"), None)


def _set_on_loop(profile: Callable[..., object] | None) -> None:
    from s2_sink._transport import runtime

    async def set_it() -> None:
        sys.setprofile(profile)

    runtime.run(set_it())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--format", default="json", choices=["raw", "json", "kafka", "upsert"])
    parser.add_argument("--records", type=int, default=3000)
    parser.add_argument("--list", action="store_true", help="print each thread's module sequence")
    args = parser.parse_args(argv)

    from pyspark.sql.types import LongType, StringType, StructField, StructType

    from s2_sink.datasource import S2DataSource
    from s2_sink.lite import LiteServer
    from s2_sink.testing import fresh_basin

    with LiteServer(subprocess=True) as srv:
        basin = fresh_basin(srv.endpoint)
        _append(srv.endpoint, basin, "s", _records(args.format, args.records))
        options = {
            "s2.basin": basin,
            "s2.stream": "s",
            "s2.auth-token": "trace",
            "s2.endpoints.account": srv.endpoint,
            "s2.endpoints.basin": srv.endpoint,
            "s2.format": args.format,
            "s2.preflight": "false",
        }
        source = S2DataSource(options)
        if args.format == "json":
            schema = StructType([StructField("id", LongType()), StructField("name", StringType())])
        else:
            schema = source.schema()
        reader = source.streamReader(schema)
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        (partition,) = reader.partitions(start, end)

        def read() -> None:
            for _ in reader.read(partition):
                pass

        read()  # untraced: imports, connections
        found = trace_modules(read)
    if args.list:
        for ident, seq in found["sequences"].items():
            print(f"thread {ident}: {' > '.join(m.removeprefix('s2_sink.') for m in seq)}")
    print("\n".join(found["module_names"]))
    summary = {"format": args.format, "records": args.records, "modules": found["modules"]}
    summary["returns"] = found["returns"]
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
