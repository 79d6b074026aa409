"""Ingest rate of the lite server: 150-byte records through one S2S append session.

    python -m benchmarks.lite_ingest [--records 1000000] [--batch 1000] [--record-bytes 150] [--data-dir DIR]

The server runs in its own process (``LiteServer(subprocess=True)``; single-threaded, so at most one core,
plus the fsync thread with ``--data-dir``). Two clients: ``--client raw`` (default) sends frames encoded
before the clock starts over a minimal ``h2`` client, so the server is the bottleneck and the figure is the
server's ingest rate; ``--client sdk`` uses the official SDK's ``AppendSession``, whose per-record encoding in
Python costs more than the server's work. Reported: records/s and MiB/s by wall clock, and the server
process's CPU seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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
from s2_sink.lite._wire import pb
from s2_sink.lite.server import LiteServer
from s2_sink.testing import fresh_basin


def _cpu_seconds(pid: int) -> float:
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


async def _ingest_raw(endpoint: str, basin: str, records: int, batch: int, size: int) -> float:
    """One S2S append session over a bare h2 connection, frames pre-encoded, up to 64 batches in flight."""
    inp = pb.AppendInput(records=[pb.AppendRecord(body=os.urandom(size)) for _ in range(batch)])
    frame = encode_frame(inp.SerializeToString())
    n_batches = records // batch
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


def main(argv: list[str] | None = None) -> None:
    """Run the measurement and print one summary line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--record-bytes", type=int, default=150)
    ap.add_argument("--client", choices=("raw", "sdk"), default="raw")
    ap.add_argument("--data-dir", default=None, help="durable mode: log + fsync in this directory")
    ap.add_argument(
        "--endpoint", default=None, help="measure a server that is already running (e.g. profiled)"
    )
    args = ap.parse_args(argv)
    ingest = _ingest_raw if args.client == "raw" else _ingest
    if args.endpoint:
        basin = fresh_basin(args.endpoint)
        wall = asyncio.run(ingest(args.endpoint, basin, args.records, args.batch, args.record_bytes))
        print(f"{args.records / wall:,.0f} records/s")
        return
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = (
            None if args.data_dir is None else (Path(args.data_dir) if args.data_dir != "tmp" else Path(tmp))
        )
        with LiteServer(subprocess=True, data_dir=data_dir) as srv:
            assert srv.process is not None
            pid = srv.process.pid
            basin = fresh_basin(srv.endpoint)
            cpu0 = _cpu_seconds(pid)
            wall = asyncio.run(ingest(srv.endpoint, basin, args.records, args.batch, args.record_bytes))
            cpu = _cpu_seconds(pid) - cpu0
    n = (args.records // args.batch) * args.batch
    mib = n * args.record_bytes / (1024 * 1024)
    print(
        f"{n} records of {args.record_bytes} B in batches of {args.batch}"
        f" ({'durable' if data_dir else 'in memory'}, {args.client} client):"
        f" {n / wall:,.0f} records/s, {mib / wall:,.1f} MiB/s wall;"
        f" server CPU {cpu:.2f} s = {n / max(cpu, 1e-9):,.0f} records per server CPU-second"
    )


if __name__ == "__main__":
    main()
