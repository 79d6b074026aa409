"""The writer under S2's append rate limit, against a throttled lite server on a manual clock.

The server refuses the 201st batch of a second on a stream and connection with 429 ``rate_limited`` (a
session ends with that terminal frame; nothing after it is applied). The appender's retry waits are the
only thing that moves the server's clock, and the retry policy's, here, so what the tests see follows
from the retry policy alone, not from how fast this machine is: a stream that keeps landing appends writes
everything, on both append paths, while one the server never admits again fails at its delivery deadline.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import orjson
import pytest

from s2_sink._transport import retry as _retry
from s2_sink._transport.retry import Patience
from s2_sink._write.task.appender import Appender
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import WritePlan
from s2_sink.errors import WriteError
from s2_sink.lite import LiteServer, ManualClock
from s2_sink.lite._throttle import BATCHES_PER_SECOND
from s2_sink.testing import fresh_basin
from tests.integration._s2read import read_stream
from tests.unit.write.test_partition_writer import config, ctx, frame, stream_rows

ROWS = 3 * BATCHES_PER_SECOND + 50
"""One record per append: more than three windows' worth of batches on one stream."""

WINDOW_S = 1.0
"""The throttle's window: a second after the first append of a full one, there is room again."""

DEADLINE_MS = 1500
"""The delivery deadline of these writes: longer than a window, shorter than the retries of a run of
refusals could stretch without it."""


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    """The throttled server's time: it moves only when the appender waits (see `retry_waits`)."""
    return ManualClock()


@pytest.fixture(scope="module")
def throttled(clock: ManualClock) -> Iterator[LiteServer]:
    """A lite server enforcing S2's append limits on the manual clock."""
    with LiteServer(throttle=True, clock=clock) as srv:
        yield srv


def retry_waits(
    monkeypatch: pytest.MonkeyPatch, on_wait: Callable[[float], None], basin: str | None = None
) -> list[float]:
    """Replaces asyncio's sleep for the appender's retry waits only (the calls from `Appender._recover`,
    on the library's loop), of appenders writing to `basin` when given: each wait is recorded, moves the
    retry policy's clock, is handed to `on_wait` and returns at once.
    Every other sleep (the session pool's reaper, the server's own) stays real."""
    waits: list[float] = []
    real_sleep = asyncio.sleep
    monkeypatch.setattr(_retry, "_clock", lambda: sum(waits))
    recover = Appender._recover.__code__

    def ours(frame: Any) -> bool:
        appender = frame.f_locals.get("self")
        return basin is None or getattr(getattr(appender, "cfg", None), "basin", None) == basin

    def sleep(delay: float, result: object = None) -> Coroutine[Any, Any, object]:
        caller = sys._getframe(1)
        if caller.f_code is recover and ours(caller):
            waits.append(delay)
            on_wait(delay)
            return real_sleep(0, result)
        return real_sleep(delay, result)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    return waits


def plan(srv: LiteServer, basin: str, stream: str, **kw: Any) -> WritePlan:
    """One record per append, every append in flight at once (so acks are collected late: a refusal is
    met while acks of the same session are still uncollected)."""
    cfg = config(
        srv, basin, batch_max_records=1, max_inflight_requests=10_000, delivery_timeout_ms=DEADLINE_MS, **kw
    )
    return WritePlan(cfg=cfg, batch_id=7, stream=stream)


def bodies(n: int) -> list[bytes | None]:
    return [orjson.dumps({"id": i}) for i in range(n)]


def test_a_stream_that_keeps_landing_appends_writes_everything(
    throttled: LiteServer, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run of refusals is waited out (the waits pass a window before the deadline) and ends in
    progress, which starts the deadline again: all rows land once, in order, after more waiting in all
    than one stream may do without progress."""
    basin = fresh_basin(throttled.endpoint)
    waits = retry_waits(monkeypatch, clock.advance, basin)
    p = plan(throttled, basin, "trickle")
    result = stream_rows(write_partition(p, [frame(bodies(ROWS))], ctx(7)))["trickle"]
    got = [orjson.loads(r.body)["id"] for r in read_stream(throttled.endpoint, basin, "trickle")]
    assert got == list(range(ROWS))
    assert result["records"] == ROWS
    assert result["retries"] == len(waits)
    assert sum(waits) >= (ROWS // BATCHES_PER_SECOND) * WINDOW_S > DEADLINE_MS / 1000


def test_a_stream_never_admitted_again_fails_at_its_deadline(
    throttled: LiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's clock stands still, so after the first window's worth nothing is admitted again: the
    task fails once its waits, growing from the base delay (never jittered towards zero), reach the
    delivery deadline, with a WriteError naming the stream, the rate limit, the fix and the option."""
    basin = fresh_basin(throttled.endpoint)
    waits = retry_waits(monkeypatch, lambda _: None, basin)
    p = plan(throttled, basin, "stuck")
    with pytest.raises(WriteError, match=r"'stuck'.*session retries.*rate limit") as failed:
        write_partition(p, [frame(bodies(ROWS))], ctx(7))
    assert "sink.batch.max-size" in str(failed.value)
    assert f"raise s2.delivery-timeout-ms (S2Config.delivery_timeout_ms, now {DEADLINE_MS})" in str(
        failed.value
    )
    policy = Patience.of(p.cfg).backoff
    for n, wait in enumerate(waits[:-1]):
        assert policy.step(n) <= wait <= 2 * policy.step(n)
    assert sum(waits) == pytest.approx(DEADLINE_MS / 1000)  # the last wait ends at the deadline
    landed = read_stream(throttled.endpoint, basin, "stuck")
    assert [orjson.loads(r.body)["id"] for r in landed] == list(range(BATCHES_PER_SECOND))


def test_acks_collected_after_a_recovery_counted_them_do_not_renew_the_retries(
    throttled: LiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One window's worth of appends lands and is acknowledged but not yet collected (nothing waits for
    acks while the in-flight bounds allow more); then one-row batches are each refused, the refusal seen
    when the next one is submitted, until the deadline. A recovery counts those early acks as progress
    once; collecting them afterwards must not start the deadline again: the task fails once its waits
    reach one deadline (two before: the late collection renewed the budget)."""
    basin = fresh_basin(throttled.endpoint)
    waits = retry_waits(monkeypatch, lambda _: None, basin)
    p = plan(throttled, basin, "late-acks")
    rows = bodies(BATCHES_PER_SECOND + 1 + 12)

    def batches() -> Iterator[Any]:
        yield frame(rows[:BATCHES_PER_SECOND])  # admitted: the window is full after these
        for i in range(BATCHES_PER_SECOND, len(rows)):
            time.sleep(0.3)  # the previous append's refusal reaches the client meanwhile
            yield frame(rows[i : i + 1])

    with pytest.raises(WriteError, match=r"'late-acks'.*session retries"):
        write_partition(p, batches(), ctx(7))
    assert sum(waits) == pytest.approx(DEADLINE_MS / 1000)
    landed = read_stream(throttled.endpoint, basin, "late-acks")
    assert len(landed) == BATCHES_PER_SECOND
