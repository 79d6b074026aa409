"""Ingest rate of the lite server: 150-byte records through one S2S append session.

    python -m benchmarks.lite_ingest [--records 1000000] [--batch 1000] [--record-bytes 150] [--data-dir DIR]
        [--shape body|first-tagged|two-headers ...] [--baseline GIT-REVISION] [--repeat 1] [--read]

The server runs in its own process (``LiteServer(subprocess=True)``; single-threaded, so at most one core,
plus the fsync thread with ``--data-dir``). Two clients: ``--client raw`` (default) sends frames encoded
before the clock starts over a minimal ``h2`` client, so the server is the bottleneck and the figure is the
server's ingest rate; ``--client sdk`` uses the official SDK's ``AppendSession``, whose per-record encoding in
Python costs more than the server's work. Reported: records/s and MiB/s by wall clock, and the server
process's CPU seconds.

``--shape`` picks what the raw client's records carry (several may be given, each measured in turn): ``body``
(body only), ``first-tagged`` (an exactly-once chunk tag header on each batch's first record, as the writer
sends), ``two-headers`` (``@key`` and ``@action`` on every record, as the upsert encoder sends).
``--baseline REV`` also runs every shape against the lite server of that git revision (its ``s2_sink``
exported to a temporary directory and run from there), so before and after come from one run on one machine;
``--repeat N`` runs N rounds of every case, alternating which server goes first, and ends with the best CPU
of each case. ``--read`` also reads every record back in one S2S read session (raw h2 client) and reports
the server's CPU for that.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess as sp
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.settings
from s2_sdk import S2, AppendInput, Endpoints, Record, Timeout

from s2_sink.lite._framing import encode_frame
from s2_sink.lite._wire import RawList, pb
from s2_sink.lite.server import LiteServer
from s2_sink.testing import fresh_basin

SHAPES = ("body", "first-tagged", "two-headers")
_TAG = pb.Header(name=b"@s2sink", value=b"1 5f3a9c2e 3 1042 7 0 12 1000")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


async def _ingest(endpoint: str, basin: str, records: int, batch: int, size: int) -> float:
    inputs = [AppendInput(records=[Record(body=os.urandom(size)) for _ in range(batch)])]
    n_batches = records // batch
    async with S2(
        "bench",
        endpoints=Endpoints(account=endpoint, basin=endpoint),
        timeout=Timeout(request=timedelta(seconds=30)),
    ) as s2:
        stream = s2.basin(basin).stream("bench")
        # Warm up the connection and the stream.
        await stream.append(inputs[0])
        start = time.perf_counter()
        async with stream.append_session(max_unacked_bytes=32 * 1024 * 1024) as sess:
            tickets = [await sess.submit(inputs[0]) for _ in range(n_batches)]
            for t in tickets:
                await t
        return time.perf_counter() - start


def _raw_input(batch: int, size: int, shape: str) -> bytes:
    """One encoded ``AppendInput`` of `batch` random bodies of `size` bytes, with the headers of `shape`."""
    records = [pb.AppendRecord(body=os.urandom(size)) for _ in range(batch)]
    if shape == "first-tagged":
        records[0].headers.append(_TAG)
    elif shape == "two-headers":
        for i, rec in enumerate(records):
            rec.headers.add(name=b"@key", value=b'{"id":%d}' % i)
            rec.headers.add(name=b"@action", value=b"u")
    elif shape != "body":
        raise ValueError(f"unknown shape {shape!r}, expected one of {SHAPES}")
    out: bytes = pb.AppendInput(records=records).SerializeToString()
    return out


async def _ingest_raw(
    endpoint: str, basin: str, records: int, batch: int, size: int, *, shape: str = "body"
) -> float:
    """One S2S append session over a bare h2 connection, frames pre-encoded, up to 64 batches in flight."""
    return await append_frames(endpoint, basin, _raw_input(batch, size, shape), records // batch)


async def append_frames(endpoint: str, basin: str, message: bytes, n_batches: int) -> float:
    """Append the encoded ``AppendInput`` `message` `n_batches` times to stream ``bench`` on one S2S
    append session over a bare h2 connection (up to 64 batches in flight); returns the wall seconds."""
    frame = encode_frame(message)
    host, port = endpoint.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16 * 1024 * 1024})
    conn.increment_flow_control_window(16 * 1024 * 1024)
    sid = conn.get_next_available_stream_id()
    conn.send_headers(
        sid,
        [
            (":method", "POST"),
            (":path", "/v1/streams/bench/records"),
            (":scheme", "http"),
            (":authority", f"{host}:{port}"),
            ("content-type", "s2s/proto"),
            ("s2-basin", basin),
        ],
    )
    writer.write(conn.data_to_send())
    sent = acked = 0
    pending = b""  # part of ``frame`` not yet accepted by flow control
    ackbuf = bytearray()
    start = time.perf_counter()
    while acked < n_batches:
        while (pending or sent < n_batches) and sent - acked < 64:
            if not pending:
                pending = frame
                sent += 1
            room = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
            if room <= 0:
                break
            chunk, pending = pending[:room], pending[room:]
            conn.send_data(sid, chunk, end_stream=(sent == n_batches and not pending))
            if pending:
                break
        writer.write(conn.data_to_send())
        data = await reader.read(1 << 20)
        if not data:
            raise RuntimeError("server closed the connection")
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.DataReceived) and ev.data:
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                ackbuf += ev.data
                while len(ackbuf) >= 3 and len(ackbuf) >= 3 + int.from_bytes(ackbuf[:3], "big"):
                    n = int.from_bytes(ackbuf[:3], "big")
                    if ackbuf[3] & 0x80:
                        raise RuntimeError(f"terminal frame: {bytes(ackbuf[4 : 3 + n])!r}")
                    del ackbuf[: 3 + n]
                    acked += 1
            elif isinstance(ev, h2.events.StreamReset):
                raise RuntimeError("stream reset by server")
    elapsed = time.perf_counter() - start
    writer.write(conn.data_to_send())
    writer.close()
    return elapsed


async def _read_raw(endpoint: str, basin: str, records: int) -> int:
    """Read records ``[0, records)`` back in one S2S read session over a bare h2 connection; returns the
    number of records read."""
    host, port = endpoint.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: 16 * 1024 * 1024})
    conn.increment_flow_control_window(16 * 1024 * 1024)
    sid = conn.get_next_available_stream_id()
    conn.send_headers(
        sid,
        [
            (":method", "GET"),
            (":path", f"/v1/streams/bench/records?seq_num=0&count={records}"),
            (":scheme", "http"),
            (":authority", f"{host}:{port}"),
            ("content-type", "s2s/proto"),
            ("accept-encoding", "identity"),
            ("s2-basin", basin),
        ],
        end_stream=True,
    )
    writer.write(conn.data_to_send())
    buf = bytearray()
    got = 0
    ended = False
    while not ended:
        data = await reader.read(1 << 20)
        if not data:
            raise RuntimeError("server closed the connection")
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.DataReceived) and ev.data:
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                buf += ev.data
                while len(buf) >= 3 and len(buf) >= 3 + int.from_bytes(buf[:3], "big"):
                    n = int.from_bytes(buf[:3], "big")
                    if buf[3]:
                        raise RuntimeError(f"terminal or compressed frame: {bytes(buf[4 : 3 + n])[:200]!r}")
                    got += len(RawList.FromString(bytes(buf[4 : 3 + n])).items)
                    del buf[: 3 + n]
            elif isinstance(ev, h2.events.StreamEnded):
                ended = True
            elif isinstance(ev, h2.events.StreamReset):
                raise RuntimeError("stream reset by server")
        writer.write(conn.data_to_send())
    writer.close()
    return got


class Server:
    """A lite server process: this checkout's (`LiteServer`) or one run from an exported source tree."""

    def __init__(self, source: Path | None, data_dir: Path | None) -> None:
        self._source = source
        self._data_dir = data_dir
        self._lite: LiteServer | None = None
        self._process: sp.Popen[str] | None = None
        self.endpoint = ""
        self.pid = 0

    def __enter__(self) -> Server:
        if self._source is None:
            self._lite = LiteServer(subprocess=True, data_dir=self._data_dir).start()
            assert self._lite.process is not None
            self.endpoint, self.pid = self._lite.endpoint, self._lite.process.pid
            return self
        cmd = [sys.executable, "-m", "s2_sink.lite", "--port", "0"]
        if self._data_dir is not None:
            cmd += ["--data-dir", str(self._data_dir)]
        # Run from the exported tree: ``-m`` puts the working directory first on sys.path.
        self._process = sp.Popen(cmd, cwd=self._source, stdout=sp.PIPE, text=True)
        assert self._process.stdout is not None
        line = self._process.stdout.readline().strip()
        if not line.startswith("http://"):
            self._process.kill()
            self._process.wait()
            raise RuntimeError(f"baseline lite server failed to start (first line {line!r})")
        self.endpoint, self.pid = line, self._process.pid
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lite is not None:
            self._lite.stop()
        if self._process is not None:
            self._process.terminate()
            self._process.wait(timeout=30)


def export(revision: str, into: Path) -> Path:
    """This repository's ``s2_sink`` package at `revision`, written under `into`."""
    root = Path(__file__).resolve().parent.parent
    into.mkdir(parents=True)
    archive = sp.run(
        ["git", "-C", str(root), "archive", "--format=tar", revision, "s2_sink"],
        check=True,
        capture_output=True,
    ).stdout
    sp.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _measure(
    source: Path | None, data_dir: Path | None, args: argparse.Namespace, shape: str
) -> tuple[float, float, float | None]:
    """One server, one shape: wall seconds and the server's CPU seconds of the ingest, and (with
    ``--read``) the server's CPU seconds to read every record back."""
    with Server(source, data_dir) as srv:
        basin = fresh_basin(srv.endpoint)
        cpu0 = cpu_seconds(srv.pid)
        if args.client == "raw":
            wall = asyncio.run(
                _ingest_raw(srv.endpoint, basin, args.records, args.batch, args.record_bytes, shape=shape)
            )
        else:
            wall = asyncio.run(_ingest(srv.endpoint, basin, args.records, args.batch, args.record_bytes))
        cpu1 = cpu_seconds(srv.pid)
        if not args.read:
            return wall, cpu1 - cpu0, None
        n = (args.records // args.batch) * args.batch
        got = asyncio.run(_read_raw(srv.endpoint, basin, n))
        if got != n:
            raise RuntimeError(f"read back {got} records of {n}")
        return wall, cpu1 - cpu0, cpu_seconds(srv.pid) - cpu1


def _summary(args: argparse.Namespace, shape: str, durable: bool, wall: float, cpu: float) -> str:
    n = (args.records // args.batch) * args.batch
    mib = n * args.record_bytes / (1024 * 1024)
    return (
        f"{n} records of {args.record_bytes} B in batches of {args.batch}"
        f" ({'durable' if durable else 'in memory'}, {args.client} client, {shape}):"
        f" {n / wall:,.0f} records/s, {mib / wall:,.1f} MiB/s wall;"
        f" server CPU {cpu:.2f} s = {cpu / n * 1e6:.3f} us per record"
    )


def main(argv: list[str] | None = None) -> None:
    """Run the measurement and print one summary line per server and shape."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--record-bytes", type=int, default=150)
    ap.add_argument("--client", choices=("raw", "sdk"), default="raw")
    ap.add_argument("--data-dir", default=None, help="durable mode: log + fsync in this directory")
    ap.add_argument(
        "--endpoint", default=None, help="measure a server that is already running (e.g. profiled)"
    )
    ap.add_argument(
        "--shape", action="append", choices=SHAPES, help="records' headers (raw client; default: body)"
    )
    ap.add_argument("--baseline", default=None, help="also measure the lite server of this git revision")
    ap.add_argument("--repeat", type=int, default=1, help="runs per server and shape (the best CPU is kept)")
    ap.add_argument("--read", action="store_true", help="also read every record back (one S2S read session)")
    args = ap.parse_args(argv)
    shapes = args.shape or ["body"]
    if args.client == "sdk" and shapes != ["body"]:
        ap.error("--shape needs the raw client")
    if args.endpoint:
        basin = fresh_basin(args.endpoint)
        wall = asyncio.run(
            _ingest_raw(args.endpoint, basin, args.records, args.batch, args.record_bytes, shape=shapes[0])
            if args.client == "raw"
            else _ingest(args.endpoint, basin, args.records, args.batch, args.record_bytes)
        )
        print(f"{args.records / wall:,.0f} records/s")
        return
    with tempfile.TemporaryDirectory() as tmp:
        servers: list[tuple[str, Path | None]] = [("this checkout", None)]
        if args.baseline is not None:
            servers.insert(0, (args.baseline, export(args.baseline, Path(tmp) / "baseline")))
        n = (args.records // args.batch) * args.batch
        best: dict[tuple[str, str], float] = {}
        # Rounds of every shape on every server, alternating which server goes first, so that no case always
        # meets the machine (its load from other work, its caches) as another one left it.
        for r in range(args.repeat):
            for shape in shapes:
                for label, source in servers if r % 2 == 0 else servers[::-1]:
                    data_dir = None
                    if args.data_dir is not None:
                        root = Path(args.data_dir) if args.data_dir != "tmp" else Path(tmp) / "data"
                        data_dir = root / f"{shape}-{'baseline' if source else 'current'}-{r}"
                    wall, cpu, read_cpu = _measure(source, data_dir, args, shape)
                    best[shape, label] = min(best.get((shape, label), cpu), cpu)
                    line = _summary(args, shape, data_dir is not None, wall, cpu)
                    if read_cpu is not None:
                        best[f"{shape} read", label] = min(
                            best.get((f"{shape} read", label), read_cpu), read_cpu
                        )
                        line += f"; read back: server CPU {read_cpu / n * 1e6:.3f} us per record"
                    print(f"{label:>14}: {line}", flush=True)
        if args.baseline is not None:
            print(f"\nserver CPU per record, best of {args.repeat} ({args.baseline} -> this checkout):")
            for case in [*shapes, *(f"{shape} read" for shape in shapes if args.read)]:
                before, after = best[case, args.baseline] / n * 1e6, best[case, "this checkout"] / n * 1e6
                print(f"  {case:>17}: {before:.3f} us -> {after:.3f} us ({after / before:.2f}x)")
        print(f"\nserver CPU per record, best of {args.repeat}, against body-only on the same server:")
        for label, _ in servers:
            base = best["body", label] if "body" in shapes else None
            row = ", ".join(
                f"{shape} {best[shape, label] / n * 1e6:.3f} us"
                + (f" ({best[shape, label] / base:.2f}x)" if base else "")
                for shape in shapes
            )
            print(f"  {label:>14}: {row}")


if __name__ == "__main__":
    main()
