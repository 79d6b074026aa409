"""``LiteServer``: run the lite S2 server on a background thread (own event loop) or as a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess as sp
import sys
import threading
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import httpx

from s2_sink.lite._api import LiteApp
from s2_sink.lite._clock import Clock
from s2_sink.lite._durability import LOG_NAME, DurableLog, replay
from s2_sink.lite._faults import FaultCounters, Faults
from s2_sink.lite._janitor import SWEEP_INTERVAL_S, Janitor
from s2_sink.lite._listener import SniffingProtocol
from s2_sink.lite._stats import RequestStats
from s2_sink.lite._store import DELETION_DELAY_S, Store

__all__ = ["LiteServer", "RemoteFaults", "serve"]

log = logging.getLogger(__name__)


class _Running:
    """A started server inside its event loop."""

    def __init__(
        self,
        app: LiteApp,
        server: asyncio.Server,
        conns: set[asyncio.Transport],
        janitor: asyncio.Task[None],
    ) -> None:
        self.app = app
        self.server = server
        self.conns = conns
        self.janitor = janitor

    @property
    def port(self) -> int:
        sock = self.server.sockets[0]
        port: int = sock.getsockname()[1]
        return port

    async def close(self) -> None:
        self.server.close()
        self.janitor.cancel()
        for transport in list(self.conns):
            transport.abort()
        for task in list(self.app.tasks):
            task.cancel()
        await asyncio.gather(self.janitor, *self.app.tasks, return_exceptions=True)
        if self.app.log is not None:
            self.app.log.close()


async def start_server(
    host: str,
    port: int,
    data_dir: Path | None,
    token: str | None,
    faults: Faults,
    *,
    throttle: bool = False,
    clock: Clock | None = None,
    stats: RequestStats | None = None,
    deletion_delay_s: float = DELETION_DELAY_S,
    sweep_interval_s: float = SWEEP_INTERVAL_S,
) -> _Running:
    """Replay the log (if any) and start listening."""
    loop = asyncio.get_running_loop()
    store = Store(clock, deletion_delay_s=deletion_delay_s)
    durable_log: DurableLog | None = None
    if data_dir is not None:
        # Startup work before listening: blocking file I/O is fine here.
        n = replay(data_dir / LOG_NAME, store)
        log.info("replayed %d log entries from %s", n, data_dir)
        durable_log = DurableLog(data_dir, loop)
    app = LiteApp(store, durable_log, faults, token, clock=store.clock, throttle=throttle, stats=stats)
    conns: set[asyncio.Transport] = set()
    server = await loop.create_server(lambda: SniffingProtocol(app, conns), host, port, reuse_address=True)
    janitor = asyncio.ensure_future(Janitor(store, sweep_interval_s).run())
    return _Running(app, server, conns, janitor)


async def serve(
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    data_dir: Path | None = None,
    token: str | None = None,
    faults: bool = False,
    throttle: bool = False,
    deletion_delay_s: float = DELETION_DELAY_S,
    ready: Any = None,
) -> None:
    """Run until SIGINT/SIGTERM; ``ready(endpoint)`` is called once listening."""
    running = await start_server(
        host, port, data_dir, token, Faults(faults), throttle=throttle, deletion_delay_s=deletion_delay_s
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    if ready is not None:
        ready(f"http://{host}:{running.port}")
    try:
        await stop.wait()
    finally:
        await running.close()


class RemoteFaults:
    """The ``Faults`` API for a server in another process, driven over ``POST /_lite/faults``."""

    def __init__(self, endpoint: str, token: str | None = None) -> None:
        self._endpoint = endpoint
        self._headers = {"authorization": f"Bearer {token}"} if token else {}

    def _post(self, doc: dict[str, Any]) -> dict[str, Any]:
        with httpx.Client(http1=False, http2=True, timeout=10.0) as client:
            if doc:
                resp = client.post(f"{self._endpoint}/_lite/faults", json=doc, headers=self._headers)
            else:
                resp = client.get(f"{self._endpoint}/_lite/faults", headers=self._headers)
        resp.raise_for_status()
        out: dict[str, Any] = resp.json()
        return out

    def fail_next_appends(self, n: int, status: int = 503) -> None:
        """See ``Faults.fail_next_appends``."""
        self._post({"fail_next_appends": {"n": n, "status": status}})

    def drop_connections(self, after_appends: int = 0, *, ambiguous: bool = False, times: int = 1) -> None:
        """See ``Faults.drop_connections``."""
        self._post(
            {"drop_connections": {"after_appends": after_appends, "ambiguous": ambiguous, "times": times}}
        )

    def delay_acks(self, ms: int) -> None:
        """See ``Faults.delay_acks``."""
        self._post({"delay_acks_ms": ms})

    def clear(self) -> None:
        """See ``Faults.clear``."""
        self._post({"clear": True})

    def counters(self) -> FaultCounters:
        """See ``Faults.counters``."""
        return FaultCounters(**self._post({})["counters"])


class LiteServer:
    """A lite S2 server for tests and local development.

    ``with LiteServer() as srv:`` starts it on a free port of 127.0.0.1 on a background thread with its own
    event loop; ``srv.endpoint`` is ``"http://127.0.0.1:<port>"`` for both the account and the basin endpoint
    of the SDK. ``subprocess=True`` runs it as ``python -m s2_sink.lite`` in a child process instead
    (``kill()`` sends SIGKILL). ``data_dir`` makes it durable (append-only log, fsync before ack, replay on
    start); ``token`` makes it answer 401 to any other bearer token; ``faults=True`` arms nothing but allows
    ``srv.faults`` to inject faults. ``throttle=True`` enforces S2's per-stream append limits with 429s.
    ``clock`` (in-process servers only) replaces the real clock, e.g. with a ``ManualClock`` a test advances.
    ``stats=True`` (in-process servers only) counts requests by kind and records appended and read per stream
    in ``srv.stats`` (`RequestStats`; ``srv.stats.snapshot()``). ``deletion_delay_s`` is how long a deleted
    basin or stream stays pending (409 ``*_deletion_pending``) before it is gone (404). ``sweep_interval_s``
    (in-process servers only) is how often retention, ``delete_on_empty`` and due deletions are swept, over
    every stream (S2's own background tasks run every 60 s; a harness holding 100,000 streams sweeps less).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        data_dir: str | os.PathLike[str] | None = None,
        token: str | None = None,
        faults: bool = False,
        throttle: bool = False,
        clock: Clock | None = None,
        subprocess: bool = False,
        stats: bool = False,
        deletion_delay_s: float = DELETION_DELAY_S,
        sweep_interval_s: float = SWEEP_INTERVAL_S,
    ) -> None:
        if clock is not None and subprocess:
            raise ValueError("clock= needs an in-process server: it cannot be passed to a subprocess")
        if stats and subprocess:
            raise ValueError("stats=True needs an in-process server: its counters live in this process")
        if sweep_interval_s != SWEEP_INTERVAL_S and subprocess:
            raise ValueError("sweep_interval_s= needs an in-process server")
        self.host = host
        self.port = port
        self.data_dir = Path(data_dir) if data_dir is not None else None
        self.token = token
        self.allow_faults = faults
        self.throttle = throttle
        self.clock = clock
        self.deletion_delay_s = deletion_delay_s
        self.sweep_interval_s = sweep_interval_s
        self.subprocess = subprocess
        self.stats: RequestStats | None = RequestStats() if stats else None
        self.endpoint = ""
        self.faults: Faults | RemoteFaults = Faults(faults)
        self.process: sp.Popen[str] | None = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._running: _Running | None = None

    def __repr__(self) -> str:
        mode = "subprocess" if self.subprocess else "thread"
        return f"LiteServer(endpoint={self.endpoint!r}, mode={mode}, data_dir={self.data_dir})"

    # -- lifecycle -------------------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start and wait until it accepts connections."""
        if self.subprocess:
            self._start_process()
        else:
            self._start_thread()
        return self

    def _start_thread(self) -> None:
        ready = threading.Event()
        error: list[BaseException] = []
        faults = self.faults
        assert isinstance(faults, Faults)

        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                self._running = await start_server(
                    self.host,
                    self.port,
                    self.data_dir,
                    self.token,
                    faults,
                    throttle=self.throttle,
                    clock=self.clock,
                    stats=self.stats,
                    deletion_delay_s=self.deletion_delay_s,
                    sweep_interval_s=self.sweep_interval_s,
                )
            except BaseException as exc:
                error.append(exc)
                ready.set()
                return
            self.port = self._running.port
            self.endpoint = f"http://{self.host}:{self.port}"
            ready.set()
            try:
                await self._stop.wait()
            finally:
                await self._running.close()

        self._thread = threading.Thread(target=lambda: asyncio.run(main()), name="s2-lite", daemon=True)
        self._thread.start()
        ready.wait()
        if error:
            raise RuntimeError(f"lite server failed to start: {error[0]}") from error[0]

    def _start_process(self) -> None:
        cmd = [sys.executable, "-m", "s2_sink.lite", "--host", self.host, "--port", str(self.port)]
        if self.data_dir is not None:
            cmd += ["--data-dir", str(self.data_dir)]
        if self.token is not None:
            cmd += ["--token", self.token]
        if self.allow_faults:
            cmd.append("--allow-faults")
        if self.throttle:
            cmd.append("--throttle")
        if self.deletion_delay_s != DELETION_DELAY_S:
            cmd += ["--deletion-delay", str(self.deletion_delay_s)]
        self.process = sp.Popen(cmd, stdout=sp.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        if not line.startswith("http://"):
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"lite server subprocess failed to start (first line {line!r})")
        self.endpoint = line
        self.port = int(line.rsplit(":", 1)[1])
        self.faults = RemoteFaults(self.endpoint, self.token)

    def stop(self) -> None:
        """Stop gracefully (SIGTERM for a subprocess)."""
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except sp.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
            if self.process.stdout is not None:
                self.process.stdout.close()
            self.process = None
        if self._thread is not None and self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join(timeout=10)
            self._thread = None

    def kill(self) -> None:
        """SIGKILL the subprocess server: nothing is flushed, as in a crash."""
        if self.process is None:
            raise RuntimeError("kill() needs a subprocess server (LiteServer(subprocess=True))")
        self.process.kill()
        self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.process = None

    def restart(self) -> Self:
        """Start again on the same port and data directory (after ``stop`` or ``kill``)."""
        self.stop()
        return self.start()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
