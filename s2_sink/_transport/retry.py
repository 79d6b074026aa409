"""Retry policy as pure parts: which failures another attempt may fix, which of them cannot have been
applied, and how long to wait between attempts.

These retries sit on top of the SDK's own (see docs/architecture.md, "Retries"): unary requests (stream
creation, reads, fences, ledger appends) are retried by the SDK first, and the loops here only see what
survived its ``max_retries``; append sessions are opened with SDK retries off, so the partition writer's
session-level retry is the only one there.

Rate limits are waited out rather than raced: a 429 ``rate_limited`` refusal applied nothing, and an
attempt inside the window that refused it is refused again, so its wait never jitters down to zero (see
`Backoff.wait`).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from s2_sdk import S2ClientError, S2ServerError

from s2_sink.config import S2Config

__all__ = [
    "BOOKKEEPING",
    "SESSION_MAX_DELAY_S",
    "Backoff",
    "Retries",
    "no_side_effects",
    "rate_limited",
    "retry_after_s",
    "retryable",
]

SESSION_MAX_DELAY_S = 30.0
"""Longest wait between two attempts to re-open a failed append session."""


def retryable(exc: BaseException) -> bool:
    """Whether another attempt may succeed: 408, 429, 499 and 5xx responses, a 409
    ``transaction_conflict``, and transport failures (the SDK wraps them in `S2ClientError`; raw
    `OSError` and `TimeoutError` come from below it or from our own ack watchdog).

    Authorization, missing resources, append conditions (412) and any other 4xx are final, and so is
    anything that is not an S2 or transport error.
    """
    if isinstance(exc, S2ServerError):
        status = exc.status_code
        return status in (408, 429, 499) or status >= 500 or exc.code == "transaction_conflict"
    return isinstance(exc, S2ClientError | OSError | TimeoutError)


def no_side_effects(exc: BaseException) -> bool:
    """Whether nothing of the failed attempt can have been applied (as the SDK's ``has_no_side_effects``):
    a ``429 rate_limited`` or ``502 hot_server`` refusal, or a connection that was never established."""
    if isinstance(exc, S2ServerError):
        return (exc.status_code == 429 and exc.code == "rate_limited") or (
            exc.status_code == 502 and exc.code == "hot_server"
        )
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return True
        cause = cause.__cause__
    return False


def rate_limited(exc: BaseException) -> bool:
    """A ``429 rate_limited`` refusal: over S2's append limits, nothing of the attempt applied."""
    return isinstance(exc, S2ServerError) and exc.status_code == 429 and exc.code == "rate_limited"


def retry_after_s(exc: BaseException) -> float | None:
    """The server's ``retry-after-ms`` hint in seconds, when the refusal carried one.

    The SDK keeps a refused unary request's hint on its error (``_retry_after``). A refused append
    session has none: a terminal frame carries no headers (and S2 itself throttles a running session
    through backpressure rather than refusing it; the lite server refuses it, to exercise retries)."""
    hint = getattr(exc, "_retry_after", None)
    return float(hint) if isinstance(hint, int | float) and hint >= 0 else None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential waits between attempts: ``first``, ``2 * first``, ``4 * first`` … each capped at
    ``cap``, ``retries`` of them; with ``jitter``, each wait is drawn uniformly from ``[0, wait]`` (full
    jitter, so that tasks failing together do not come back together)."""

    first: float
    """The first wait, in seconds."""

    cap: float
    """No wait is longer than this, in seconds."""

    retries: int
    """How many waits (attempts after the first) there are; the generator then ends."""

    jitter: bool = True
    """Full jitter (``True``) or the plain exponential sequence."""

    @classmethod
    def for_sessions(cls, cfg: S2Config) -> Backoff:
        """The append-session retry of the partition writer: the SDK does not retry append sessions (see
        `s2_sink._transport.session_pool`), so both ``max_retries`` and ``session_retries`` apply here."""
        return cls(
            first=cfg.retry_delay_ms / 1000,
            cap=SESSION_MAX_DELAY_S,
            retries=cfg.max_retries + cfg.session_retries,
        )

    def step(self, retry: int) -> float:
        """The exponential step of retry number `retry` (0 = the first): ``first * 2**retry``, capped."""
        return min(self.first * 2.0 ** min(retry, 64), self.cap)

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits, in seconds, in order; exhausted when no retry is left."""
        uniform = (rng or random).uniform
        for retry in range(self.retries):
            step = self.step(retry)
            yield uniform(0, step) if self.jitter else step

    def wait(self, retry: int, exc: BaseException, rng: random.Random | None = None) -> float | None:
        """The wait before retry number `retry` (0 = the first since the last progress) after `exc`, in
        seconds; ``None`` when no retry is left.

        Any failure but a rate limit: as `delays` (full jitter over the step). A ``429 rate_limited``
        refusal: drawn from ``[step, 2 * step]`` (the SDK's own backoff shape, never near zero) and at
        least the server's ``retry-after-ms`` hint. S2's append limits are one-second windows, so a run
        of refusals is waited out once its waits add up to a second: with the session defaults (100 ms,
        5 retries) that is by the fourth retry, whatever the draws.
        """
        if not 0 <= retry < self.retries:
            return None
        step = self.step(retry)
        uniform = (rng or random).uniform
        if not rate_limited(exc):
            return uniform(0, step) if self.jitter else step
        wait = min(uniform(step, 2 * step), self.cap) if self.jitter else step
        hint = retry_after_s(exc)
        return wait if hint is None else max(wait, hint)


BOOKKEEPING: Final = Backoff(first=0.1, cap=2.0, retries=6, jitter=False)
"""Our retries over the SDK's for the exactly-once bookkeeping calls (fences, sign-ins, read-back reads,
ledger appends): 6 more tries, 0.1 s doubling to 2 s, no jitter (each is conditional or idempotent)."""


class Retries:
    """One retry loop's budget under a `Backoff`: the single place a loop decides whether to try again.

    ``await retries.after(exc)`` inside the ``except`` of an attempt waits before the next one, or re-raises
    ``exc`` when it is final (``retry_on`` says no) or the budget is spent; `next_wait` is for a loop that
    raises its own error when the budget is spent.
    """

    __slots__ = ("_retry_on", "_waits", "backoff")

    def __init__(
        self, backoff: Backoff = BOOKKEEPING, *, retry_on: Callable[[BaseException], bool] = retryable
    ) -> None:
        self.backoff = backoff
        self._waits = backoff.delays()
        self._retry_on = retry_on

    def next_wait(self) -> float | None:
        """The wait before the next attempt, in seconds; None when the budget is spent."""
        return next(self._waits, None)

    async def after(self, exc: BaseException) -> None:
        """Wait before the next attempt after ``exc``; re-raise ``exc`` if it is final or no retry is left."""
        delay = self.next_wait() if self._retry_on(exc) else None
        if delay is None:
            raise exc
        await asyncio.sleep(delay)
