"""The lite S2 server in its own process (its CPU shares no GIL with the driver and is measured apart), and
its ingest rate, measured with the lite package's own measurement client. The server stands in for S2: its CPU
is reported beside the sink's, never as a target."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["LiteProcess", "ingest_rate", "lite_process"]


@dataclass(frozen=True)
class LiteProcess:
    endpoint: str
    pid: int


@contextlib.contextmanager
def lite_process(tree: str | None = None) -> Iterator[LiteProcess]:
    """``LiteServer(subprocess=True)`` (in memory, no faults) for the duration of the block; with `tree`, the
    ``s2_sink.lite`` of that checkout instead (``--lite-from``: two clients measured against one server)."""
    if tree is not None:
        with _lite_from(tree) as lite:
            yield lite
        return
    from s2_sink.lite import LiteServer

    with LiteServer(subprocess=True) as srv:
        assert srv.process is not None
        yield LiteProcess(endpoint=srv.endpoint, pid=srv.process.pid)


@contextlib.contextmanager
def _lite_from(tree: str) -> Iterator[LiteProcess]:
    cmd = [sys.executable, "-m", "s2_sink.lite", "--host", "127.0.0.1", "--port", "0"]
    env = {**os.environ, "PYTHONPATH": tree}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=tree, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if not line.startswith("http://"):
            raise RuntimeError(f"the lite server of {tree} did not start (first line {line!r})")
        yield LiteProcess(endpoint=line, pid=proc.pid)
    finally:
        proc.terminate()
        proc.wait()


def _cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        f = fh.read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def ingest_rate(lite: LiteProcess, records: int, record_bytes: int = 150) -> dict[str, Any]:
    """Records/s the server ingests over one S2S session of 1000-record batches, for two clients:
    ``raw`` (frames encoded before the clock starts: the server is the bottleneck) and ``sdk`` (the official
    SDK's AppendSession: its per-record Python encoding adds to the client side)."""
    from benchmarks import lite_ingest
    from s2_sink.testing import fresh_basin

    out: dict[str, Any] = {"records": records, "record_bytes": record_bytes, "batch": 1000}
    for client, fn in (("raw", lite_ingest._ingest_raw), ("sdk", lite_ingest._ingest)):
        basin = fresh_basin(lite.endpoint)
        cpu0 = _cpu(lite.pid)
        wall = asyncio.run(fn(lite.endpoint, basin, records, 1000, record_bytes))
        cpu = _cpu(lite.pid) - cpu0
        out[client] = {
            "records_per_s": records / wall,
            "mib_per_s": records * record_bytes / wall / 2**20,
            "server_cpu_us_per_rec": cpu / records * 1e6,
        }
    out["summary"] = (
        f"{out['raw']['records_per_s']:,.0f} records/s with pre-encoded frames "
        f"(server CPU {out['raw']['server_cpu_us_per_rec']:.2f} us/record), "
        f"{out['sdk']['records_per_s']:,.0f} records/s through the SDK's AppendSession "
        f"({records:,} x {record_bytes} B records, 1000 per batch)"
    )
    return out
