"""The background work S2 does on its own: retention, ``delete_on_empty`` and completing deletions.

One sweep every ``interval`` seconds of real time, reading the server's clock (so a test with a
``ManualClock`` moves time forward and waits one sweep):

- records whose batch arrived longer ago than the stream's ``retention_policy.age`` are trimmed (whole
  batches; the age counts from arrival, not from a client-supplied timestamp);
- a stream with ``delete_on_empty.min_age_secs`` that retains no record and has had no write for that long is
  deleted (asynchronously, like any delete);
- pending basin and stream deletions whose delay has passed are completed.
"""

from __future__ import annotations

import asyncio
import logging

from s2_sink.lite._store import Store

__all__ = ["SWEEP_INTERVAL_S", "Janitor"]

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 0.2
"""Seconds between sweeps, by default: short, so a test sees a retention or a deletion complete quickly."""


class Janitor:
    """Sweeps a store periodically."""

    def __init__(self, store: Store, interval: float = SWEEP_INTERVAL_S) -> None:
        self.store = store
        self.interval = interval

    def sweep(self) -> None:
        """One pass over every stream, then complete due deletions."""
        store = self.store
        now = store.clock.time()
        for stream in list(store.iter_streams()):
            if stream.deleted:
                continue
            age = stream.config.get("retention_policy", {}).get("age")
            if age and stream.expire(int((now - age) * 1000)):
                log.debug("retention trimmed %s/%s to %d", stream.basin, stream.name, stream.trim_point)
            min_age = (stream.config.get("delete_on_empty") or {}).get("min_age_secs", 0)
            if min_age and stream.is_empty() and now - stream.last_write_s() >= min_age:
                log.info("deleting empty stream %s/%s (delete_on_empty)", stream.basin, stream.name)
                store.delete_stream(stream.basin, stream.name)
        store.finish_deletions()

    async def run(self) -> None:
        """Sweep until cancelled."""
        while True:
            try:
                self.sweep()
            except Exception:
                log.exception("background sweep failed")
            await asyncio.sleep(self.interval)
