"""Time as the server sees it: record arrival times, throttling windows and retention ages.

The server reads time through one ``Clock``; tests swap in a ``ManualClock`` to move time forward at will
(an hour of retention, or a throttling window frozen in place) without sleeping.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["Clock", "ManualClock", "now_ms", "rfc3339"]


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def rfc3339(ts: float) -> str:
    """RFC 3339 UTC timestamp, as BasinInfo/StreamInfo carry it."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


class Clock:
    """The real clock."""

    def time(self) -> float:
        """Seconds since the epoch."""
        return time.time()

    def now_ms(self) -> int:
        """Milliseconds since the epoch (record arrival timestamps)."""
        return time.time_ns() // 1_000_000


class ManualClock(Clock):
    """A clock that stands still until ``advance`` moves it (starts at the real time of its creation)."""

    def __init__(self, start: float | None = None) -> None:
        self._now = time.time() if start is None else start

    def time(self) -> float:
        """Seconds since the epoch, as last set."""
        return self._now

    def now_ms(self) -> int:
        """Milliseconds since the epoch, as last set."""
        return int(self._now * 1000)

    def advance(self, seconds: float) -> None:
        """Move time forward."""
        if seconds < 0:
            raise ValueError(f"a clock only moves forward, got {seconds}")
        self._now += seconds
