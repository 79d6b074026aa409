"""The retry policy: which failures another attempt may fix, which of them cannot have been applied, how long
to wait between attempts, and until when (docs/architecture.md, "Retries").

A failure another attempt may fix is retried with exponential backoff until ``S2Config.delivery_timeout_ms``
passes after the call last made progress. Whether a retry may *re-send* is another question: an append of
unknown outcome is never sent again by an exactly-once writer (`no_side_effects`). The pure parts decide on a
clock tests replace; `Retrying.after` and `patiently` sleep and log each outage when it starts and ends.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

from s2_sdk import S2ClientError, S2ServerError

from s2_sink._transport.explain import deadline_note, explain, past_deadline
from s2_sink._transport.sdk import (
    AppendIndefiniteFailureError,
    ConnectError,
    TransportError,
    requires_reconnect,
)
from s2_sink.config import S2Config

__all__ = [
    "DEFAULT_PATIENCE",
    "MAX_WAIT_S",
    "Backoff",
    "Patience",
    "Retrying",
    "no_side_effects",
    "patiently",
    "rate_limited",
    "retry_after_s",
    "retryable",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_WAIT_S: Final = 2.0
"""The longest wait between two attempts (unless ``retry_delay_ms`` is longer): once S2 answers again,
the sink notices within this."""

# S2's error codes that promise the request had no side effects, each with its status (the official server's
# api/src/v1/error.rs, ``ErrorCode::has_no_side_effects`` and ``::status``; its Rust SDK trusts a code only
# with its own status). ``unavailable`` (503) is not one of them.
_NO_SIDE_EFFECTS: Final = frozenset(
    (code, status)
    for status, codes in {
        400: "bad_frame bad_header bad_json bad_path bad_proto bad_query decryption_failed",
        401: "authn",
        403: "permission_denied quota_exhausted",
        404: "access_token_not_found basin_not_found stream_not_found",
        409: "basin_deletion_pending resource_already_exists stream_deletion_pending transaction_conflict",
        422: "invalid",
        429: "rate_limited",
        501: "not_implemented",
        502: "hot_server",
        503: "server_draining",
    }.items()
    for code in codes.split()
)


def retryable(exc: BaseException) -> bool:
    """Whether another attempt may succeed: 408, 429, 499 and 5xx responses, a 409 ``transaction_conflict``,
    and transport failures (`S2ClientError` from the SDK, its raw ``TransportError`` from our own sessions,
    `OSError` and `TimeoutError` from below it or our ack watchdog). Any other 4xx is final, and so is what
    is not an S2 or transport error; an ``AppendIndefiniteFailureError`` is judged by its last attempt."""
    if isinstance(exc, AppendIndefiniteFailureError):
        return retryable(exc.final_attempt_error)
    if isinstance(exc, S2ServerError):
        status = exc.status_code
        return status in (408, 429, 499) or status >= 500 or exc.code == "transaction_conflict"
    return isinstance(exc, S2ClientError | TransportError | OSError | TimeoutError)


def no_side_effects(exc: BaseException) -> bool:
    """Whether nothing of the failed attempt can have been applied, as S2 defines it: a refusal whose code
    promises so, or a request that never left (the connection could not be made, or was retired first: the
    Rust SDK's ``has_no_side_effects``). Never an ``AppendIndefiniteFailureError``: an earlier attempt of the
    SDK's may have applied."""
    if isinstance(exc, S2ServerError):
        return (exc.code, exc.status_code) in _NO_SIDE_EFFECTS
    cause: BaseException | None = exc
    while cause is not None and not isinstance(cause, AppendIndefiniteFailureError):
        if isinstance(cause, ConnectError | ConnectionRefusedError) or (
            isinstance(cause, Exception) and requires_reconnect(cause)
        ):
            return True
        cause = cause.__cause__
    return False


def rate_limited(exc: BaseException) -> bool:
    """A ``429 rate_limited`` refusal: over S2's append limits, nothing of the attempt applied."""
    return isinstance(exc, S2ServerError) and exc.status_code == 429 and exc.code == "rate_limited"


def retry_after_s(exc: BaseException) -> float | None:
    """The server's ``retry-after-ms`` hint in seconds, kept by the SDK on a refused unary request's error
    (``_retry_after``); a refused append session has none (a terminal frame carries no headers)."""
    hint = getattr(exc, "_retry_after", None)
    return float(hint) if isinstance(hint, int | float) and hint >= 0 else None


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential waits between attempts, in seconds: ``first``, ``2 * first`` … each capped at ``cap``;
    with ``jitter``, each drawn uniformly from ``[0, step]`` (so tasks failing together come back apart)."""

    first: float
    cap: float
    jitter: bool = True

    def step(self, retry: int) -> float:
        """The exponential step of retry number `retry` (0 = the first): ``first * 2**retry``, capped."""
        return min(self.first * 2.0 ** min(retry, 64), self.cap)

    def wait(self, retry: int, exc: BaseException, rng: random.Random | None = None) -> float:
        """The wait before retry number `retry` (0 = the first since the last progress) after `exc`.

        A ``429 rate_limited`` refusal waits ``[step, 2 * step]`` (the SDK's own shape, never near zero) and
        at least the server's ``retry-after-ms`` hint: S2's append limits are one-second windows, waited out
        whatever the draws once the waits add up to a second (with the defaults, by the fourth retry).
        """
        step = self.step(retry)
        uniform = (rng or random).uniform
        if not rate_limited(exc):
            return uniform(0, step) if self.jitter else step
        wait = min(uniform(step, 2 * step), self.cap) if self.jitter else step
        hint = retry_after_s(exc)
        return wait if hint is None else max(wait, hint)


@dataclass(frozen=True, slots=True)
class Patience:
    """How long and how often the sink retries S2: `backoff` waits until `timeout_s` (the delivery deadline)
    after the first failure since the last progress. `cfg`, when known, words the failures; `fix` is what a
    user can do about an outage where ``s2.delivery-timeout-ms`` cannot be set (the ``s2-sink`` command)."""

    timeout_s: float = 120.0
    backoff: Backoff = Backoff(first=0.1, cap=MAX_WAIT_S)
    cfg: S2Config | None = field(default=None, compare=False)
    fix: str | None = None

    def deadline_words(self) -> str:
        """How the deadline is set, or `fix`: the end of the first wait's log line."""
        if self.fix is not None:
            return f"the deadline; {self.fix}"
        return f"the delivery deadline, s2.delivery-timeout-ms={round(self.timeout_s * 1000)}"

    @classmethod
    def of(cls, cfg: S2Config) -> Patience:
        """The policy `cfg` sets: ``delivery_timeout_ms``, waits from ``retry_delay_ms`` doubling to
        ``max(MAX_WAIT_S, retry_delay_ms)``, full jitter."""
        first = cfg.retry_delay_ms / 1000
        return cls(cfg.delivery_timeout_ms / 1000, Backoff(first=first, cap=max(MAX_WAIT_S, first)), cfg)

    def words(self, exc: BaseException) -> str:
        if self.cfg is not None:
            return explain(exc, self.cfg).message
        if isinstance(exc, S2ServerError):
            return f"{type(exc).__name__} {exc.status_code} {exc.code}: {exc.message}"
        return f"{type(exc).__name__}: {exc}"


_clock: Callable[[], float] = time.monotonic  # for deadlines; a test's fake clock replaces it

DEFAULT_PATIENCE: Final = Patience()
"""The policy of the default configuration."""


class Retrying:
    """One retry loop under a `Patience`: the single place a loop decides whether, and how long, to wait.

    The deadline counts from the first failure since the loop last made progress (`progress`). An outage's
    first wait is logged (WARNING: what is retried, the error, the time left) and so is its end; the waits
    between are DEBUG. `what` names what is retried and `fields` are the lines' fields for JSON logs.
    """

    __slots__ = ("_retry_on", "_rng", "failures", "fields", "patience", "since", "what")

    def __init__(
        self,
        patience: Patience,
        what: str,
        *,
        retry_on: Callable[[BaseException], bool] = retryable,
        rng: random.Random | None = None,
        fields: Mapping[str, object] | None = None,
    ) -> None:
        self.patience, self.what, self.fields = patience, what, dict(fields or {})
        self.failures = 0  # since the last progress: the retry number of the next wait
        self.since: float | None = None  # when the first of them happened (`_clock`)
        self._retry_on, self._rng = retry_on, rng

    def left(self) -> float:
        """Seconds until the deadline (the whole timeout while nothing failed)."""
        timeout = self.patience.timeout_s
        return timeout if self.since is None else self.since + timeout - _clock()

    def wait(self, exc: BaseException) -> float | None:
        """The wait before the next attempt after `exc`, counted as a failure; None when `exc` is final or
        the deadline (also an inner loop's) has passed: `give_up` then words it."""
        if not self._retry_on(exc) or past_deadline(exc):
            return None
        if self.since is None:
            self.since = _clock()
        left = self.left()
        if left <= 0:
            return None
        delay = min(self.patience.backoff.wait(self.failures, exc, self._rng), left)
        self.failures += 1
        extra = {**self.fields, "retry": self.failures, "delay_s": round(delay, 3)}
        if self.failures == 1:
            log.warning(
                "waiting for S2: %s failed: %s; retrying for up to %.1f s more (%s)",
                self.what,
                self.patience.words(exc),
                left,
                self.patience.deadline_words(),
                extra=extra,
            )
        else:
            log.debug(
                "retrying %s in %.3f s (retry %s): %s", self.what, delay, self.failures, exc, extra=extra
            )
        return delay

    def give_up(self, exc: BaseException) -> BaseException:
        """`exc`, with `deadline_note` added if it was the deadline that ran out."""
        if self.since is not None and self._retry_on(exc) and self.left() <= 0 and not past_deadline(exc):
            exc.add_note(deadline_note(_clock() - self.since, self.patience.timeout_s, self.patience.fix))
        return exc

    async def after(self, exc: BaseException) -> None:
        """Inside an attempt's ``except``: wait before the next attempt, or raise `exc` if it is final."""
        delay = self.wait(exc)
        if delay is None:
            raise self.give_up(exc)
        await asyncio.sleep(delay)

    def progress(self) -> None:
        """The loop got an answer: the next failure starts a new outage (logs the end of this one)."""
        if self.failures:
            assert self.since is not None
            took = _clock() - self.since
            log.warning(
                "S2 answers again: %s succeeded after %.1f s and %s retries",
                self.what,
                took,
                self.failures,
                extra={**self.fields, "outage_s": round(took, 3), "retries": self.failures},
            )
        self.failures, self.since = 0, None


async def patiently(
    patience: Patience,
    what: str,
    op: Callable[[], Awaitable[T]],
    *,
    retry_on: Callable[[BaseException], bool] = retryable,
) -> T:
    """``await op()`` until it succeeds, retrying what `retry_on` allows until the deadline (the caller
    vouches that `op` may be repeated: a read, an idempotent request, a conditional append it checks)."""
    retrying = Retrying(patience, what, retry_on=retry_on)
    while True:
        try:
            result = await op()
        except Exception as exc:  # noqa: BLE001 - `after` re-raises what is final or past the deadline
            await retrying.after(exc)
            continue
        retrying.progress()
        return result
