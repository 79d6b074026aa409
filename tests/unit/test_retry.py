"""The retry policy's pure parts, and the retry loops that use them with the sleep patched out."""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass, field

import pytest
from s2_sdk import (
    AppendAck,
    AppendInput,
    FencingTokenMismatchError,
    ReadBatch,
    S2ClientError,
    S2ServerError,
    StreamConfig,
    StreamPosition,
)

from s2_sink._exactly_once import fencing as _fencing
from s2_sink._exactly_once import ledger as _ledger
from s2_sink._exactly_once.fencing import Token, fence_if_older
from s2_sink._exactly_once.ledger import Ledger
from s2_sink._exactly_once.readback import read_back
from s2_sink._transport import retry as _retry
from s2_sink._transport.retry import (
    SESSION_MAX_DELAY_S,
    Backoff,
    no_side_effects,
    rate_limited,
    retry_after_s,
    retryable,
)
from s2_sink.config import S2Config
from s2_sink.errors import CommitError


def server_error(status: int, code: str = "x") -> S2ServerError:
    return S2ServerError(code, "refused", status)


@pytest.mark.parametrize("status", [408, 429, 499, 500, 502, 503, 504, 599])
def test_transient_statuses_are_retryable(status: int) -> None:
    """Timeouts, rate limits, client-closed and every 5xx may succeed on another attempt."""
    assert retryable(server_error(status))


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 412, 416, 422])
def test_other_statuses_are_final(status: int) -> None:
    """Bad requests, auth, missing resources, conflicts and conditions are not retried."""
    assert not retryable(server_error(status))


def test_transaction_conflict_is_retryable() -> None:
    """A 409 is final except for ``transaction_conflict``, which the SDK retries too."""
    assert retryable(server_error(409, "transaction_conflict"))


def test_fencing_mismatch_is_final() -> None:
    """A 412 fencing-token mismatch is an append condition, never retried as is."""
    assert not retryable(FencingTokenMismatchError("fencing_token_mismatch", "no", 412, "other"))


@pytest.mark.parametrize(
    "exc", [S2ClientError("connection reset"), ConnectionResetError(), TimeoutError("no ack")]
)
def test_transport_failures_are_retryable(exc: Exception) -> None:
    """Transport failures (wrapped by the SDK or raw) and our ack watchdog's timeout are retried."""
    assert retryable(exc)


@pytest.mark.parametrize("exc", [ValueError("bug"), KeyError("k"), RuntimeError("x")])
def test_unexpected_errors_are_final(exc: Exception) -> None:
    """Anything that is neither an S2 nor a transport error is a bug, not a transient failure."""
    assert not retryable(exc)


def test_no_side_effects_matches_the_sdk_definition() -> None:
    """Only rate-limit and hot-server refusals and refused connections cannot have been applied."""
    assert no_side_effects(server_error(429, "rate_limited"))
    assert no_side_effects(server_error(502, "hot_server"))
    assert not no_side_effects(server_error(429, "other"))
    assert not no_side_effects(server_error(503, "unavailable"))
    assert not no_side_effects(S2ClientError("reset"))
    refused = S2ClientError("connect")
    refused.__cause__ = OSError("wrapped")
    refused.__cause__.__cause__ = ConnectionRefusedError()
    assert no_side_effects(refused)


def test_plain_backoff_doubles_up_to_the_cap() -> None:
    """Without jitter the waits are first, 2x, 4x ... capped, and exactly `retries` of them."""
    waits = list(Backoff(first=0.1, cap=2.0, retries=7, jitter=False).delays())
    assert waits == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])
    assert list(Backoff(first=1, cap=1, retries=0).delays()) == []


def test_jittered_backoff_stays_under_each_exponential_step() -> None:
    """Full jitter draws each wait from [0, step]; a seeded generator makes the draw reproducible."""
    policy = Backoff(first=0.5, cap=3.0, retries=6)
    steps = list(Backoff(first=0.5, cap=3.0, retries=6, jitter=False).delays())
    waits = list(policy.delays(random.Random(7)))
    assert len(waits) == 6
    assert all(0 <= w <= s for w, s in zip(waits, steps, strict=True))
    assert waits == list(policy.delays(random.Random(7)))
    assert waits != steps


def test_session_backoff_comes_from_the_config() -> None:
    """The append-session retry starts at retry_delay_ms and allows max_retries + session_retries."""
    cfg = S2Config(
        basin="my-basin-1", stream="s", access_token="t", max_retries=4, session_retries=3, retry_delay_ms=250
    )
    policy = Backoff.for_sessions(cfg)
    assert policy == Backoff(first=0.25, cap=SESSION_MAX_DELAY_S, retries=7, jitter=True)


def rate_limit(retry_after_ms: int | None = None) -> S2ServerError:
    """A 429 rate_limited refusal as the SDK raises it, with the response's retry-after-ms if any."""
    err = server_error(429, "rate_limited")
    if retry_after_ms is not None:
        err._retry_after = retry_after_ms / 1000  # where the SDK keeps the header (_client.py)
    return err


def test_rate_limited_is_a_429_rate_limited_only() -> None:
    """Only S2's rate-limit refusal gets the rate-limit waits; other 429s and 5xx keep the usual ones."""
    assert rate_limited(rate_limit())
    assert not rate_limited(server_error(429, "other"))
    assert not rate_limited(server_error(503, "unavailable"))
    assert not rate_limited(S2ClientError("reset"))


def test_retry_after_hint_is_read_from_the_sdk_error() -> None:
    """The hint is the SDK's parsed retry-after-ms (seconds); absent or nonsense means no hint."""
    assert retry_after_s(rate_limit(750)) == pytest.approx(0.75)
    assert retry_after_s(rate_limit()) is None
    odd = rate_limit()
    odd._retry_after = "soon"  # type: ignore[assignment]
    assert retry_after_s(odd) is None
    assert retry_after_s(ValueError("x")) is None


def test_other_failures_wait_as_the_full_jitter_backoff() -> None:
    """Anything but a rate limit: retry n waits exactly what `delays` draws for it (full jitter, down to
    zero), and nothing once the retries are used up."""
    policy = Backoff(first=0.1, cap=30.0, retries=5)
    drawn = list(policy.delays(random.Random(3)))
    for exc in (server_error(503), server_error(429, "other"), S2ClientError("reset")):
        rng = random.Random(3)
        assert [policy.wait(n, exc, rng) for n in range(5)] == drawn
    assert policy.wait(5, server_error(503)) is None
    assert policy.wait(-1, server_error(503)) is None


def test_rate_limit_waits_never_jitter_towards_zero() -> None:
    """A 429 rate_limited retry n waits between its step and twice its step (first * 2**n), over many
    draws: with the session defaults, a run of refusals without progress has waited out S2's one-second
    window by the fourth retry, and the fifth and last is still to come."""
    policy = Backoff.for_sessions(S2Config(basin="my-basin-1", stream="s", access_token="t"))
    assert policy.retries == 5
    rng = random.Random(11)
    for _ in range(200):
        waits = [policy.wait(n, rate_limit(), rng) for n in range(5)]
        for n, wait in enumerate(waits):
            assert wait is not None
            assert policy.step(n) <= wait <= 2 * policy.step(n)
        assert sum(w for w in waits[:4] if w is not None) >= 1.0
    assert policy.wait(5, rate_limit(), rng) is None
    plain = Backoff(first=0.1, cap=30.0, retries=3, jitter=False)
    assert [plain.wait(n, rate_limit()) for n in range(3)] == pytest.approx([0.1, 0.2, 0.4])
    assert Backoff(first=1.0, cap=1.5, retries=3).wait(2, rate_limit(), rng) == pytest.approx(1.5)


def test_rate_limit_waits_honour_the_servers_hint() -> None:
    """A retry-after-ms hint raises the wait to it; a hint shorter than the backoff does not shorten it."""
    policy = Backoff(first=0.1, cap=30.0, retries=5, jitter=False)
    assert policy.wait(0, rate_limit(retry_after_ms=450)) == pytest.approx(0.45)
    assert policy.wait(2, rate_limit(retry_after_ms=5)) == pytest.approx(0.4)
    assert policy.wait(4, rate_limit(retry_after_ms=2500)) == pytest.approx(2.5)


@dataclass
class _FlakyStream:
    """An SDK stream whose appends and reads fail with `errors`, in order, then succeed (reads find
    nothing; the tail stays where it is)."""

    errors: list[Exception]
    name: str = "events"
    appends: list[AppendInput] = field(default_factory=list)

    reads: int = 0
    tail: int = 5

    async def append(self, inp: AppendInput) -> AppendAck:
        self.appends.append(inp)
        if self.errors:
            raise self.errors.pop(0)
        return AppendAck(StreamPosition(0, 0), StreamPosition(1, 0), StreamPosition(1, 0))

    async def check_tail(self) -> StreamPosition:
        return StreamPosition(self.tail, 0)

    async def read(self, **_: object) -> ReadBatch:
        self.reads += 1
        if self.errors:
            raise self.errors.pop(0)
        return ReadBatch(records=[])


@dataclass
class _Basin:
    """An SDK basin holding one `_FlakyStream`."""

    held: _FlakyStream
    name: str = "test-basin"

    def stream(self, name: str) -> _FlakyStream:
        return self.held

    async def create_stream(self, name: str, **_: object) -> None:
        return None

    async def get_stream_config(self, name: str) -> StreamConfig:
        return StreamConfig(retention_policy="infinite")


def _patch_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Replaces asyncio's sleep (for this test, on this thread) with one recording the requested waits.

    Event loops on other threads (the session's in-process lite server, the library's runtime loop) keep
    the real sleep: their periodic waits are not the retries under test."""
    slept: list[float] = []
    real_sleep = asyncio.sleep
    mine = threading.get_ident()

    async def sleep(delay: float, result: object = None) -> object:
        if threading.get_ident() != mine:
            return await real_sleep(delay, result)
        slept.append(delay)
        return result

    for module in (_retry, _ledger):  # the shared retry helper sleeps for the loops; the ledger's own wait
        assert module.asyncio is asyncio
    monkeypatch.setattr(asyncio, "sleep", sleep)
    return slept


def _fence(stream: _FlakyStream) -> _fencing.FenceResult:
    mine = Token(epoch=1, gen=0, writer="abcdef12")
    return asyncio.run(fence_if_older(stream, mine, current=""))  # type: ignore[arg-type]


def test_fence_retries_transient_failures_with_its_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fence failing with a 503, a reset and a transaction conflict is repeated after 0.1, 0.2 and
    0.4 s, and then lands."""
    conflict = server_error(409, "transaction_conflict")
    stream = _FlakyStream([server_error(503), S2ClientError("reset"), conflict])
    slept = _patch_sleep(monkeypatch)
    result = _fence(stream)
    assert slept == pytest.approx([0.1, 0.2, 0.4])
    assert result.position == 1
    assert len(stream.appends) == 4


def test_fence_gives_up_after_six_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seventh consecutive transient failure is raised, after waits capped at 2 s."""
    stream = _FlakyStream([server_error(503) for _ in range(7)])
    slept = _patch_sleep(monkeypatch)
    with pytest.raises(S2ServerError) as failed:
        _fence(stream)
    assert failed.value.status_code == 503
    assert slept == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0])
    assert len(stream.appends) == 7


def test_fence_does_not_retry_a_final_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 403 is raised at once, without waiting."""
    stream = _FlakyStream([server_error(403, "permission_denied")])
    slept = _patch_sleep(monkeypatch)
    with pytest.raises(S2ServerError) as failed:
        _fence(stream)
    assert failed.value.status_code == 403
    assert slept == []


def test_read_back_retries_six_times_then_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    """Read-back repeats a failed read after 0.1 s doubling to 2 s, six times, then raises the seventh
    failure; a final error (403) is raised at once."""
    slept = _patch_sleep(monkeypatch)
    stream = _FlakyStream([server_error(503), S2ClientError("reset")])
    found = asyncio.run(read_back(stream, writer="abcdef12", start=0, match=lambda _: True))  # type: ignore[arg-type]
    assert (slept, stream.reads, found.records_scanned) == (pytest.approx([0.1, 0.2]), 3, 0)
    slept.clear()
    stream = _FlakyStream([server_error(500) for _ in range(7)])
    with pytest.raises(S2ServerError):
        asyncio.run(read_back(stream, writer="abcdef12", start=0, match=lambda _: True))  # type: ignore[arg-type]
    assert slept == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0])
    assert stream.reads == 7
    slept.clear()
    with pytest.raises(S2ServerError):
        asyncio.run(read_back(_FlakyStream([server_error(403)]), writer="w", start=0, match=lambda _: True))  # type: ignore[arg-type]
    assert slept == []


def test_ledger_append_makes_eight_attempts(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ledger append failing with 503s is attempted eight times, 0.1 s doubling to 2 s apart, then
    fails with a CommitError naming the attempts."""
    slept = _patch_sleep(monkeypatch)
    stream = _FlakyStream([server_error(503) for _ in range(8)], tail=0)

    async def go() -> None:
        ledger = Ledger(_Basin(stream), "w")  # type: ignore[arg-type]
        await ledger.load()
        await ledger.append(ledger.opened("run", None))

    with pytest.raises(CommitError, match="after 8 attempts"):
        asyncio.run(go())
    assert len(stream.appends) == 8
    assert slept == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0])
