"""S2 outages for the fault suite: a lite server in its own process, with a data directory, killed (by a
crash point, or by the test) and started again on the same port and directory some seconds later, as a
failover looks from a client."""

from __future__ import annotations

import shutil
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from s2_sink._exactly_once.sign_in_registers import REGISTER_PREFIX, SignIn
from s2_sink.lite import LiteServer
from tests.faults._support import list_streams, read_all, run


def server_pid_file(tmp: Path) -> Path:
    """Where the ``kill_server`` crash point of a scenario in `tmp` finds the server's pid."""
    return tmp / "crash-plan.json.server_pid"


@dataclass
class Outages:
    """Watches `srv`; each time its process dies, starts it again ``down_s[i]`` seconds after the i-th death
    (the last value for any later one). `pid_file` always holds the running server's pid."""

    srv: LiteServer
    pid_file: Path
    down_s: Sequence[float]
    spans: list[tuple[float, float]] = field(default_factory=list)
    """(death, restart) of each outage, ``time.monotonic()`` seconds."""
    restarts: list[float] = field(default_factory=list)
    """When each outage ended, ``time.time()`` seconds (to compare with S2's record timestamps)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _up: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._watch, name="outages", daemon=True)

    def _write_pid(self) -> None:
        assert self.srv.process is not None
        self.pid_file.write_text(str(self.srv.process.pid))
        self._up.set()

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            proc = self.srv.process
            if proc is not None and proc.poll() is None:
                continue
            died = time.monotonic()
            self._up.clear()
            down = self.down_s[min(len(self.spans), len(self.down_s) - 1)]
            if self._stop.wait(down):
                return
            self.srv.restart()
            self.spans.append((died, time.monotonic()))
            self.restarts.append(time.time())
            self._write_pid()

    def kill(self) -> None:
        """SIGKILL the server now (the watcher starts it again after the outage)."""
        self._up.clear()
        self.srv.kill()

    def wait_up(self, timeout: float = 120.0) -> None:
        """Block until the server runs (again)."""
        if not self._up.wait(timeout):
            raise TimeoutError(f"the lite server was not back within {timeout} s")

    def __enter__(self) -> Outages:
        self._write_pid()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@contextmanager
def durable_server(tmp: Path) -> Iterator[LiteServer]:
    """A lite server in its own process over a data directory in `tmp`, fault hooks allowed."""
    data = tmp / "lite-data"
    srv = LiteServer(subprocess=True, data_dir=data, faults=True).start()
    try:
        yield srv
    finally:
        srv.stop()
        shutil.rmtree(data, ignore_errors=True)


def task_attempts(endpoint: str, basin: str) -> Counter[tuple[int, int]]:
    """How many task attempts signed in per (micro-batch, partition), from the writers' sign-in registers:
    more than one is a task that failed and was retried."""
    found: Counter[tuple[int, int]] = Counter()
    for stream in run(list_streams(endpoint, basin)):
        if stream.startswith(REGISTER_PREFIX):
            for rec in run(read_all(endpoint, basin, stream)):
                signed = SignIn.parse(bytes(rec.body))
                if signed is not None:
                    found[(signed.batch, signed.attempt.partition)] += 1
    return found
