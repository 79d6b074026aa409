"""Append sessions side by side: Arrow frame to acknowledged records, SDK session vs pre-encoded messages.

    python -m benchmarks.append_session [--rows 200000] [--chunk 1000] [--headers]

A lite server runs in its own process (its CPU is measured apart). The same ~100-byte JSON bodies go,
in appends of ``--chunk`` records (with ``--headers``, each with ``@key``/``@action`` headers as the upsert
encoder writes them), over one pipelined session per path:

- ``sdk``: the columns become ``Record`` objects, each append an ``AppendInput`` on the SDK's
  ``AppendSession`` (which maps and serializes every record);
- ``bulk``: ``s2_sink._wire.append.proto.encode_append_inputs`` writes the messages from the columns, and
  ``s2_sink._transport.append_session.BulkAppendSession`` sends them over the SDK's transport.

Reported per path: client CPU (this process) and server CPU in microseconds per record, and wall-clock
records/s. The last line of output is one JSON object.

With ``--streams N``, the rows go to N streams instead, one append per stream (16 at a time, as a task's
in-flight bound allows), two ways: ``session``, a ``BulkAppendSession`` per stream (open, one append,
close), and ``unary``, one unary append per stream (``append_once``, what a task sends a stream's only
append as); reported per stream as well.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pyarrow as pa
from s2_sdk import S2, AppendInput, Endpoints, Record, Retry, Timeout

from benchmarks._lite import LiteProcess, _cpu, lite_process
from benchmarks.append_proto import _frame
from s2_sink._transport.append_session import BulkAppendSession, append_once, basin_transport
from s2_sink._wire.append.proto import encode_append_inputs
from s2_sink.testing import fresh_basin

__all__ = ["main"]


def _client(lite: LiteProcess) -> S2:
    client: S2 = S2(
        "bench",
        endpoints=Endpoints(account=lite.endpoint, basin=lite.endpoint),
        timeout=Timeout(request=timedelta(seconds=30), connection=timedelta(seconds=5)),
        retry=Retry(max_attempts=1),
    )
    return client


async def _sdk(client: S2, basin: str, body: pa.Array, headers: pa.Array | None, chunk: int) -> None:
    records = [
        Record(b, hs) for b, hs in zip(body.to_pylist(), _header_lists(headers, len(body)), strict=True)
    ]
    session = client.basin(basin).stream("sdk").append_session()
    tickets = [
        await session.submit(AppendInput(records=records[lo : lo + chunk]))
        for lo in range(0, len(records), chunk)
    ]
    for ticket in tickets:
        await ticket
    await session.close()


async def _bulk(client: S2, basin: str, body: pa.Array, headers: pa.Array | None, chunk: int) -> None:
    bounds = [*range(0, len(body), chunk), len(body)]
    messages = encode_append_inputs(body, headers, None, bounds, fencing_token=None)
    session = BulkAppendSession(basin_transport(client, basin), "bulk")
    tickets = [session.submit(m, hi - lo) for m, lo, hi in zip(messages, bounds, bounds[1:], strict=False)]
    for ticket in tickets:
        await ticket
    await session.close()


def _header_lists(headers: pa.Array | None, n: int) -> list[list[tuple[bytes, bytes]]]:
    if headers is None:
        return [[] for _ in range(n)]
    return [[(h["name"], h["value"]) for h in row] for row in headers.to_pylist()]


Path = Callable[[S2, str, pa.Array, pa.Array | None, int], Awaitable[None]]


def _measure(
    lite: LiteProcess, path: Path, body: pa.Array, headers: pa.Array | None, chunk: int
) -> dict[str, Any]:
    basin = fresh_basin(lite.endpoint, token="bench")

    async def go() -> tuple[float, float, float]:
        client = _client(lite)
        async with client:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            server, wall = _cpu(lite.pid), time.perf_counter()
            await path(client, basin, body, headers, chunk)
            wall = time.perf_counter() - wall
            after = resource.getrusage(resource.RUSAGE_SELF)
            server = _cpu(lite.pid) - server
        client_cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
        return client_cpu, server, wall

    client_cpu, server_cpu, wall = asyncio.run(go())
    n = len(body)
    return {
        "client_us_per_record": round(client_cpu / n * 1e6, 3),
        "server_us_per_record": round(server_cpu / n * 1e6, 3),
        "records_per_s": round(n / wall),
    }


def _per_stream(lite: LiteProcess, streams: int, body: pa.Array) -> dict[str, Any]:
    """One append per stream over `streams` streams, as a session each and as a unary append each."""
    basin = fresh_basin(lite.endpoint, token="bench")
    per = len(body) // streams
    names = [f"s{i:06d}" for i in range(streams)]
    messages = encode_append_inputs(body, None, None, [0, per], fencing_token=None)
    message = messages[0]

    async def session(transport: Any, name: str) -> None:
        bulk = BulkAppendSession(transport, name)
        await bulk.submit(message, per)
        await bulk.close()

    async def unary(transport: Any, name: str) -> None:
        await append_once(transport, name, message, per)

    async def go() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with _client(lite) as client:
            b = client.basin(basin)
            gate = asyncio.Semaphore(16)

            async def create(_: Any, name: str) -> None:
                await b.create_stream(name)

            async def bounded(fn: Callable[[Any, str], Awaitable[None]], transport: Any, name: str) -> None:
                async with gate:
                    await fn(transport, name)

            await asyncio.gather(*(bounded(create, None, n) for n in names))
            transport = basin_transport(client, basin)
            for name, path in (("session", session), ("unary", unary)):
                usage = resource.getrusage(resource.RUSAGE_SELF)
                server, wall = _cpu(lite.pid), time.perf_counter()
                await asyncio.gather(*(bounded(path, transport, n) for n in names))
                wall = time.perf_counter() - wall
                after = resource.getrusage(resource.RUSAGE_SELF)
                client_cpu = after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime
                server_cpu = _cpu(lite.pid) - server
                out[name] = {
                    "client_us_per_stream": round(client_cpu / streams * 1e6),
                    "server_us_per_stream": round(server_cpu / streams * 1e6),
                    "streams_per_s": round(streams / wall),
                }
        return out

    return asyncio.run(go())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--headers", action="store_true", help="two headers per record (@key, @action)")
    parser.add_argument("--streams", type=int, default=0, help="one append to each of this many streams")
    args = parser.parse_args(argv)
    body, headers = _frame(args.rows, with_headers=args.headers)
    out: dict[str, Any] = {"rows": args.rows, "chunk": args.chunk, "headers": args.headers}
    if args.streams:
        with lite_process() as lite:
            out |= _per_stream(lite, args.streams, body)
        for name in ("session", "unary"):
            print(f"{name:>7}: {out[name]}")
        print(json.dumps(out))
        return out
    with lite_process() as lite:
        for name, path in (("sdk", _sdk), ("bulk", _bulk)):
            out[name] = _measure(lite, path, body, headers, args.chunk)
            print(f"{name:>5}: {out[name]}")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
