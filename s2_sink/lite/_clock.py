"""Wall-clock helpers: record arrival times and the RFC 3339 timestamps of resource infos."""

from __future__ import annotations

import time
from datetime import UTC, datetime

__all__ = ["now_ms", "rfc3339"]


def now_ms() -> int:
    """Arrival time in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def rfc3339(ts: float) -> str:
    """RFC 3339 UTC timestamp, as BasinInfo/StreamInfo carry it."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")
