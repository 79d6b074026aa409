"""Fault injection for tests of retries and exactly-once delivery. Off unless the server allows faults.

Every fault is real at the wire: a 503 response or terminal frame, a TCP connection aborted with no goodbye,
acks held back. ``drop_connections(after_appends=n, ambiguous=False)`` lets ``n`` more appends through, then
on the next one aborts the connection *before* applying it; with ``ambiguous=True`` the next append is applied
and made durable and the connection is aborted *before its ack is sent* -- the case where a client cannot know
whether it took effect.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["FaultCounters", "Faults", "FaultsDisabledError"]


class FaultsDisabledError(RuntimeError):
    """Raised when faults are armed on a server started without ``faults=True`` / ``--allow-faults``."""


@dataclass
class FaultCounters:
    """How many faults were injected so far."""

    failed_appends: int = 0
    dropped_connections: int = 0
    ambiguous_drops: int = 0
    delayed_acks: int = 0


@dataclass
class _State:
    fail_remaining: int = 0
    fail_status: int = 503
    drop_after: int | None = None
    drop_interval: int = 0
    drop_ambiguous: bool = False
    drop_times: int = 0
    delay_ms: int = 0
    counters: FaultCounters = field(default_factory=FaultCounters)


#: What the server should do with an incoming append.
PASS = 0
FAIL = 1
DROP_BEFORE = 2
DROP_AFTER_DURABLE = 3


class Faults:
    """Thread-safe fault switchboard shared by the server loop and the test thread (or the HTTP endpoint)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._lock = threading.Lock()
        self._s = _State()

    def _check(self) -> None:
        if not self.enabled:
            raise FaultsDisabledError(
                "fault hooks are off: start the server with faults=True or --allow-faults"
            )

    def fail_next_appends(self, n: int, status: int = 503) -> None:
        """
        The next ``n`` appends (unary requests or session inputs) fail with ``status`` and change nothing."""
        self._check()
        with self._lock:
            self._s.fail_remaining = n
            self._s.fail_status = status

    def drop_connections(self, after_appends: int = 0, *, ambiguous: bool = False, times: int = 1) -> None:
        """After ``after_appends`` more appends, abort the connection of the next one (``times`` times)."""
        self._check()
        with self._lock:
            self._s.drop_after = after_appends
            self._s.drop_interval = after_appends
            self._s.drop_ambiguous = ambiguous
            self._s.drop_times = times

    def delay_acks(self, ms: int) -> None:
        """Hold every append ack (and unary append response) back by ``ms`` milliseconds."""
        self._check()
        with self._lock:
            self._s.delay_ms = ms

    def clear(self) -> None:
        """Disarm every fault (counters are kept)."""
        with self._lock:
            counters = self._s.counters
            self._s = _State(counters=counters)

    def counters(self) -> FaultCounters:
        """A snapshot of the injected-fault counters."""
        with self._lock:
            return FaultCounters(**asdict(self._s.counters))

    def snapshot(self) -> dict[str, Any]:
        """Armed faults and counters, as the HTTP endpoint reports them."""
        with self._lock:
            s = self._s
            return {
                "enabled": self.enabled,
                "fail_next_appends": {"n": s.fail_remaining, "status": s.fail_status},
                "drop_connections": None
                if s.drop_after is None
                else {"after_appends": s.drop_after, "ambiguous": s.drop_ambiguous, "times": s.drop_times},
                "delay_acks_ms": s.delay_ms,
                "counters": asdict(s.counters),
            }

    def configure(self, doc: dict[str, Any]) -> None:
        """Apply an HTTP ``POST /_lite/faults`` document (see docs/lite.md)."""
        self._check()
        if doc.get("clear"):
            self.clear()
        if "fail_next_appends" in doc:
            spec = doc["fail_next_appends"]
            if isinstance(spec, int):
                self.fail_next_appends(spec)
            else:
                self.fail_next_appends(int(spec["n"]), int(spec.get("status", 503)))
        if "drop_connections" in doc:
            spec = doc["drop_connections"]
            if spec is None:
                with self._lock:
                    self._s.drop_after = None
            else:
                self.drop_connections(
                    int(spec.get("after_appends", 0)),
                    ambiguous=bool(spec.get("ambiguous", False)),
                    times=int(spec.get("times", 1)),
                )
        if "delay_acks_ms" in doc:
            self.delay_acks(int(doc["delay_acks_ms"]))

    # -- used by the server ----------------------------------------------------------------------------------

    @property
    def active(self) -> bool:
        """Cheap check for the hot path: is anything armed?"""
        s = self._s
        return self.enabled and (s.fail_remaining > 0 or s.drop_after is not None or s.delay_ms > 0)

    def on_append(self) -> tuple[int, int]:
        """Decide the fate of one incoming append: (action, status for FAIL)."""
        with self._lock:
            s = self._s
            if s.fail_remaining > 0:
                s.fail_remaining -= 1
                s.counters.failed_appends += 1
                return FAIL, s.fail_status
            if s.drop_after is not None:
                if s.drop_after > 0:
                    s.drop_after -= 1
                    return PASS, 0
                s.drop_times -= 1
                s.drop_after = None if s.drop_times <= 0 else s.drop_interval
                s.counters.dropped_connections += 1
                if s.drop_ambiguous:
                    s.counters.ambiguous_drops += 1
                    return DROP_AFTER_DURABLE, 0
                return DROP_BEFORE, 0
            return PASS, 0

    def ack_delay(self) -> float:
        """Seconds to hold the next ack back (0 when off)."""
        s = self._s
        if s.delay_ms <= 0:
            return 0.0
        with self._lock:
            s.counters.delayed_acks += 1
        return s.delay_ms / 1000.0
