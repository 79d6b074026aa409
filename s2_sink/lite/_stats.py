"""Request accounting, off unless the server is started with ``stats=True``.

Counts what clients cost the server, per stream: requests by kind, records appended and records served by
reads. Cost measurements (``benchmarks.eo_cost``) read it to count a client protocol's S2 requests and records
read without wrapping anything on the client side.

Kinds: ``append`` (a unary append), ``append_session`` (an append session opened), ``session_append`` (one
``AppendInput`` of a session), ``read`` (a unary read), ``read_session``, ``check_tail`` and ``control``
(anything else: basins, stream configs, the lite server's own routes). The server's loop writes, any thread
may take a snapshot.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["RequestStats", "StatsSnapshot", "request_kind"]


@dataclass(frozen=True, slots=True)
class StatsSnapshot:
    """The counts at one moment; ``stream`` is ``""`` for requests that name no stream."""

    requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(kind, stream) -> requests."""
    records_read: Counter[str] = field(default_factory=Counter)
    """stream -> records served by reads (unary and sessions)."""
    records_appended: Counter[str] = field(default_factory=Counter)
    """stream -> records appended (command records included)."""

    def __sub__(self, earlier: StatsSnapshot) -> StatsSnapshot:
        return StatsSnapshot(
            self.requests - earlier.requests,
            self.records_read - earlier.records_read,
            self.records_appended - earlier.records_appended,
        )


def request_kind(method: str, path: str, content_type: str, accept: str) -> str:
    """The kind of one request (see the module docstring)."""
    if not path.startswith("/v1/streams/"):
        return "control"
    if path.endswith("/records/tail"):
        return "check_tail"
    if not path.endswith("/records"):
        return "control"
    if method == "POST":
        return "append_session" if content_type == "s2s/proto" else "append"
    if content_type == "s2s/proto" or accept.split(",", 1)[0].strip() == "text/event-stream":
        return "read_session"
    return "read"


class RequestStats:
    """Thread-safe counters of one server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = StatsSnapshot()

    def request(self, kind: str, stream: str = "") -> None:
        with self._lock:
            self._now.requests[(kind, stream)] += 1

    def served(self, stream: str, records: int) -> None:
        if records:
            with self._lock:
                self._now.records_read[stream] += records

    def appended(self, stream: str, records: int) -> None:
        with self._lock:
            self._now.records_appended[stream] += records

    def snapshot(self) -> StatsSnapshot:
        with self._lock:
            now = self._now
            return StatsSnapshot(
                Counter(now.requests), Counter(now.records_read), Counter(now.records_appended)
            )

    def reset(self) -> None:
        with self._lock:
            self._now = StatsSnapshot()
