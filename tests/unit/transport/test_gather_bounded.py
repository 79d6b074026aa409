"""`gather_bounded`: a task's stream creates and its created streams' fences, a bounded number at once."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from s2_sink._transport.runtime import gather_bounded


def test_results_in_order_and_never_more_than_the_limit_at_once() -> None:
    running, most = 0, 0

    async def one(i: int) -> int:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.001 * (i % 3))
        running -= 1
        return i

    assert asyncio.run(gather_bounded((one(i) for i in range(20)), 4)) == list(range(20))
    assert most == 4


def test_the_first_failure_cancels_the_rest() -> None:
    """A task that failed a fence gives up at once: the fences still running or waiting for their turn stop
    too, instead of running on, on the shared loop, until their deadline."""
    finished: list[int] = []

    async def fence(i: int) -> int:
        if i == 0:
            raise RuntimeError("refused")
        await asyncio.sleep(0.2)
        finished.append(i)
        return i

    async def main() -> None:
        with pytest.raises(RuntimeError, match="refused"):
            await gather_bounded((fence(i) for i in range(6)), 3)
        await asyncio.sleep(0.5)

    asyncio.run(main())
    assert finished == []


def test_cancelled_before_its_tasks_start_it_leaves_no_awaitable_unawaited() -> None:
    """A caller interrupted (``run`` timed out or interrupted) just as the gather made its tasks: those
    cancelled before their first step close their awaitables too, so none is left never awaited (the
    planning's lookups pass their coroutines in)."""

    async def lookup() -> None:
        await asyncio.sleep(1)

    async def main() -> None:
        lookups = asyncio.create_task(gather_bounded([lookup(), lookup(), lookup()], 2))
        await asyncio.sleep(0)  # the gather makes its tasks; none has taken its first step yet
        lookups.cancel()
        with pytest.raises(asyncio.CancelledError):
            await lookups

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
