"""S2's per-stream append limits, enforced when the server runs with ``--throttle``.

S2 allows 200 batches/s per stream per client connection and 100 MiB/s of appends per stream. Over either
limit an append is refused with 429 ``rate_limited`` (and a ``retry-after-ms`` hint) before it is applied, so
a refused batch never lands and a client that retries it writes it once. Both limits are sliding one-second
windows; bytes are counted as the batch's encoded size, which is within a few bytes per record of its metered
size.
"""

from __future__ import annotations

from collections import deque
from weakref import WeakKeyDictionary

from s2_sink.lite._api_errors import ApiError
from s2_sink.lite._clock import Clock
from s2_sink.lite._stream import Stream

__all__ = ["BATCHES_PER_SECOND", "BYTES_PER_SECOND", "Throttle"]

BATCHES_PER_SECOND = 200
BYTES_PER_SECOND = 100 * 1024 * 1024
_WINDOW = 1.0


class _BytesWindow:
    __slots__ = ("entries", "total")

    def __init__(self) -> None:
        self.entries: deque[tuple[float, int]] = deque()
        self.total = 0


class Throttle:
    """Admits or refuses appends against the per-stream limits."""

    def __init__(
        self,
        clock: Clock,
        *,
        batches_per_second: int = BATCHES_PER_SECOND,
        bytes_per_second: int = BYTES_PER_SECOND,
    ) -> None:
        self.clock = clock
        self.batches_per_second = batches_per_second
        self.bytes_per_second = bytes_per_second
        # Keyed weakly, so a closed connection or a deleted stream takes its windows with it.
        self._batches: WeakKeyDictionary[Stream, WeakKeyDictionary[object, deque[float]]] = (
            WeakKeyDictionary()
        )
        self._bytes: WeakKeyDictionary[Stream, _BytesWindow] = WeakKeyDictionary()
        self.refused = 0

    def admit(self, connection: object, stream: Stream, nbytes: int) -> None:
        """Count one batch of ``nbytes`` on ``stream`` from ``connection``, or raise 429 if over a limit."""
        now = self.clock.time()
        since = now - _WINDOW
        per_conn = self._batches.setdefault(stream, WeakKeyDictionary())
        batches = per_conn.setdefault(connection, deque())
        while batches and batches[0] <= since:
            batches.popleft()
        window = self._bytes.setdefault(stream, _BytesWindow())
        entries = window.entries
        while entries and entries[0][0] <= since:
            window.total -= entries.popleft()[1]
        if len(batches) >= self.batches_per_second:
            self._refuse(
                batches[0] + _WINDOW - now,
                f"over {self.batches_per_second} batches/s on stream {stream.name!r} from one connection",
            )
        if entries and window.total + nbytes > self.bytes_per_second:
            self._refuse(
                entries[0][0] + _WINDOW - now,
                f"over {self.bytes_per_second // (1024 * 1024)} MiB/s appended to stream {stream.name!r}",
            )
        batches.append(now)
        entries.append((now, nbytes))
        window.total += nbytes

    def _refuse(self, wait_s: float, why: str) -> None:
        self.refused += 1
        wait_ms = max(1, int(wait_s * 1000) + 1)
        raise ApiError(
            429, "rate_limited", f"rate limited: {why}", headers=[("retry-after-ms", str(wait_ms))]
        )
