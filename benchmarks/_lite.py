"""The lite S2 server in its own process: its CPU shares no GIL with the driver and is measured apart."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

__all__ = ["LiteProcess", "lite_process"]


@dataclass(frozen=True)
class LiteProcess:
    endpoint: str
    pid: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], log: IO[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            tail = log.read()[-2000:].decode(errors="replace")
            raise RuntimeError(f"lite server exited with {proc.returncode} before listening:\n{tail}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"lite server did not listen on port {port} within {timeout:.0f}s")


@contextlib.contextmanager
def lite_process(timeout: float = 30.0) -> Iterator[LiteProcess]:
    """``python -m s2_sink.lite --port <free port>`` for the duration of the block."""
    port = _free_port()
    # A file, not a pipe: a chatty server must never block on a full pipe mid-benchmark.
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below, after the server stops
    proc = subprocess.Popen(
        [sys.executable, "-m", "s2_sink.lite", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_listening(port, proc, log, timeout)
        yield LiteProcess(endpoint=f"http://127.0.0.1:{port}", pid=proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
