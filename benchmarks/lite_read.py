"""Read serving cost of the lite server: every record of a stream read back on one S2S read session, the way
``spark.read.format("s2")`` reads (``s2_sink._read.session.read_columns`` on the SDK's transport).

    python -m benchmarks.lite_read [--records 1000000] [--batch 1000] [--shape body|two-headers ...]
        [--baseline GIT-REVISION] [--repeat 1]

The server runs in its own process (as in ``benchmarks.lite_ingest``, whose server handling this reuses). The
stream is filled untimed with ~150-byte JSON bodies (the benchmark dataset's rendering), in batches of
``--batch``; ``--shape two-headers`` adds ``@key`` and ``@action`` headers to every record, as the upsert
encoder writes. Then one read session reads them all and the run reports records/s by wall clock, the
server process's CPU per record and this (client) process's CPU per record. ``--baseline REV`` also measures
the lite server of that git revision (same client), alternating which goes first; ``--repeat N`` keeps the
best server CPU of N rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple

from s2_sdk import S2, Endpoints, Timeout

from benchmarks.lite_ingest import Server, append_frames, cpu_seconds, export
from s2_sink._read.session import read_columns
from s2_sink.lite._wire import pb
from s2_sink.testing import fresh_basin

__all__ = ["main"]

SHAPES = ("body", "two-headers")
_KINDS = ("view", "click", "purchase", "refund", "search")


def json_input(batch: int, shape: str) -> bytes:
    """One encoded ``AppendInput`` of `batch` JSON bodies of about 150 bytes, with the headers of `shape`."""
    records = []
    for i in range(batch):
        body = (
            b'{"id":%d,"ts":"2023-11-14T22:13:%02d.%03dZ","user":"user-%06d","kind":"%s","payload":"%s"}'
            % (i, i % 60, i % 1000, i % 100_000, _KINDS[i % 5].encode(), (b"%055x" % (i * 2654435761)))
        )
        rec = pb.AppendRecord(body=body)
        if shape == "two-headers":
            rec.headers.add(name=b"@key", value=b'{"id":%d}' % i)
            rec.headers.add(name=b"@action", value=b"u")
        elif shape != "body":
            raise ValueError(f"unknown shape {shape!r}, expected one of {SHAPES}")
        records.append(rec)
    out: bytes = pb.AppendInput(records=records).SerializeToString()
    return out


async def read_all(endpoint: str, basin: str, count: int) -> int:
    """Read records ``[0, count)`` of stream ``bench`` on one read session; returns how many came."""
    async with S2(
        "bench",
        endpoints=Endpoints(account=endpoint, basin=endpoint),
        timeout=Timeout(request=timedelta(seconds=60)),
    ) as s2:
        handle = s2.basin(basin).stream("bench")
        got = 0
        async for columns in read_columns(handle, 0, count):
            got += len(columns)
        return got


class Measure(NamedTuple):
    wall: float
    server_cpu: float
    client_cpu: float


def measure(source: Path | None, args: argparse.Namespace, shape: str) -> Measure:
    """One server, one shape: fill the stream (untimed), then read it all back."""
    n = (args.records // args.batch) * args.batch
    with Server(source, None) as srv:
        basin = fresh_basin(srv.endpoint)
        asyncio.run(append_frames(srv.endpoint, basin, json_input(args.batch, shape), n // args.batch))
        cpu0, client0, wall0 = cpu_seconds(srv.pid), time.process_time(), time.perf_counter()
        got = asyncio.run(read_all(srv.endpoint, basin, n))
        wall, client = time.perf_counter() - wall0, time.process_time() - client0
        server = cpu_seconds(srv.pid) - cpu0
    if got != n:
        raise RuntimeError(f"read back {got} records of {n}")
    return Measure(wall, server, client)


def main(argv: list[str] | None = None) -> None:
    """Run the measurement; one line per run, then the best server CPU per case."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--shape", action="append", choices=SHAPES, help="records' headers (default: body)")
    ap.add_argument("--baseline", default=None, help="also measure the lite server of this git revision")
    ap.add_argument("--repeat", type=int, default=1, help="runs per server and shape (the best CPU is kept)")
    args = ap.parse_args(argv)
    shapes = args.shape or ["body"]
    n = (args.records // args.batch) * args.batch
    with tempfile.TemporaryDirectory() as tmp:
        servers: list[tuple[str, Path | None]] = [("this checkout", None)]
        if args.baseline is not None:
            servers.insert(0, (args.baseline, export(args.baseline, Path(tmp) / "baseline")))
        best: dict[tuple[str, str], Measure] = {}
        for r in range(args.repeat):
            for shape in shapes:
                for label, source in servers if r % 2 == 0 else servers[::-1]:
                    m = measure(source, args, shape)
                    if (shape, label) not in best or m.server_cpu < best[shape, label].server_cpu:
                        best[shape, label] = m
                    print(
                        f"{label:>14}: {n} records ({shape}), one read session: {n / m.wall:,.0f} records/s;"
                        f" server CPU {m.server_cpu / n * 1e6:.3f} us/record,"
                        f" client CPU {m.client_cpu / n * 1e6:.3f} us/record",
                        flush=True,
                    )
        print(f"\nbest of {args.repeat}, server CPU per record read (client CPU):")
        for shape in shapes:
            row = "; ".join(
                f"{label} {best[shape, label].server_cpu / n * 1e6:.3f} us"
                f" ({best[shape, label].client_cpu / n * 1e6:.3f} us)"
                for label, _ in servers
            )
            print(f"  {shape:>11}: {row}")


if __name__ == "__main__":
    main()
