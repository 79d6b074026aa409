"""Retry policy as pure parts: which failures another attempt may fix, which of them cannot have been
applied, and how long to wait between attempts.

These retries sit on top of the SDK's own (see docs/architecture.md, "Retries"): unary requests (stream
creation, reads, fences, ledger appends) are retried by the SDK first, and the loops here only see what
survived its ``max_retries``; append sessions are opened with SDK retries off, so the partition writer's
session-level retry is the only one there.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from s2_sdk import S2ClientError, S2ServerError

from s2_sink.config import S2Config

__all__ = ["SESSION_MAX_DELAY_S", "Backoff", "no_side_effects", "retryable"]

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
        `s2_sink._session_pool`), so both ``max_retries`` and ``session_retries`` apply here."""
        return cls(
            first=cfg.retry_delay_ms / 1000,
            cap=SESSION_MAX_DELAY_S,
            retries=cfg.max_retries + cfg.session_retries,
        )

    def delays(self, rng: random.Random | None = None) -> Iterator[float]:
        """The waits, in seconds, in order; exhausted when no retry is left."""
        uniform = (rng or random).uniform
        wait = self.first
        for _ in range(self.retries):
            capped = min(wait, self.cap)
            yield uniform(0, capped) if self.jitter else capped
            wait *= 2
