"""The retry policy's pure parts on a fake clock, and the retry loops that use them with the sleep and the
clock faked: every loop retries what another attempt may fix until the delivery deadline, then raises the
error with words that name the option."""

from __future__ import annotations

import asyncio
import logging
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

from s2_sink._exactly_once.fencing import TaskAttempt, Token, fence_if_older
from s2_sink._exactly_once.ledger import Ledger
from s2_sink._exactly_once.readback import read_back
from s2_sink._exactly_once.sign_in_registers import SignIn, sign_in
from s2_sink._transport import retry as _retry
from s2_sink._transport.explain import explain, past_deadline
from s2_sink._transport.retry import (
    MAX_WAIT_S,
    Backoff,
    Patience,
    Retrying,
    no_side_effects,
    patiently,
    rate_limited,
    retry_after_s,
    retryable,
)
from s2_sink._transport.sdk import AppendIndefiniteFailureError, ConnectError, TransportError
from s2_sink.config import S2Config
from s2_sink.errors import CommitError

CFG = S2Config(
    basin="my-basin-1",
    stream="s",
    access_token="t",
    account_endpoint="http://127.0.0.1:9",
    basin_endpoint="http://127.0.0.1:9",
)


def server_error(status: int, code: str = "x") -> S2ServerError:
    return S2ServerError(code, "refused", status)


def refused() -> S2ClientError:
    """A refused connection as the SDK reports it: S2ClientError <- ConnectError <- ConnectionRefusedError."""
    err = S2ClientError("connect")
    err.__cause__ = ConnectError("[Errno 111] Connection refused")
    err.__cause__.__cause__ = ConnectionRefusedError(111, "Connection refused")
    return err


# -- what is retried ---------------------------------------------------------------------------------------


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
    "exc",
    [
        S2ClientError("connection reset"),
        ConnectionResetError(),
        TimeoutError("no ack"),
        TransportError("gone"),
    ],
)
def test_transport_failures_are_retryable(exc: Exception) -> None:
    """Transport failures (wrapped by the SDK, the SDK's own on our sessions, or raw) and our ack watchdog's
    timeout are retried."""
    assert retryable(exc)


@pytest.mark.parametrize("exc", [ValueError("bug"), KeyError("k"), RuntimeError("x")])
def test_unexpected_errors_are_final(exc: Exception) -> None:
    """Anything that is neither an S2 nor a transport error is a bug, not a transient failure."""
    assert not retryable(exc)


def test_no_side_effects_follows_s2s_own_definition() -> None:
    """S2 promises no side effects for 429 rate_limited, 502 hot_server, 503 server_draining and 409
    transaction_conflict (api/src/v1/error.rs, ``has_no_side_effects``), each only with its own status; not
    for 503 unavailable, 500 or 504. A connection that could not be made (any ConnectError: nothing of the
    request left) applied nothing; one that broke after the request left may have."""
    for code, status in [
        ("rate_limited", 429),
        ("hot_server", 502),
        ("server_draining", 503),
        ("transaction_conflict", 409),
    ]:
        assert no_side_effects(server_error(status, code)), code
    for code, status in [
        ("unavailable", 503),
        ("other", 500),
        ("upstream_timeout", 504),
        ("rate_limited", 503),
    ]:
        assert not no_side_effects(server_error(status, code)), (code, status)
    assert no_side_effects(refused())
    timed_out = S2ClientError("connect")
    timed_out.__cause__ = ConnectError("Connection to 10.0.0.1:443 timed out")
    assert no_side_effects(timed_out)
    reset = S2ClientError("reset")
    reset.__cause__ = TransportError("Connection reset by peer")
    assert not no_side_effects(reset)
    assert not no_side_effects(TimeoutError("no acknowledgement"))


# Every error code of the official server (api/src/v1/error.rs): its status, and whether S2 promises that a
# request refused with it had no side effects (``ErrorCode::has_no_side_effects``).
S2_ERROR_CODES = [
    ("access_token_not_found", 404, True),
    ("authn", 401, True),
    ("bad_frame", 400, True),
    ("bad_header", 400, True),
    ("bad_json", 400, True),
    ("bad_path", 400, True),
    ("bad_proto", 400, True),
    ("bad_query", 400, True),
    ("basin_deletion_pending", 409, True),
    ("basin_not_found", 404, True),
    ("client_hangup", 499, False),
    ("decryption_failed", 400, True),
    ("hot_server", 502, True),
    ("invalid", 422, True),
    ("not_implemented", 501, True),
    ("other", 500, False),
    ("permission_denied", 403, True),
    ("quota_exhausted", 403, True),
    ("rate_limited", 429, True),
    ("request_timeout", 408, False),
    ("resource_already_exists", 409, True),
    ("server_draining", 503, True),
    ("storage", 500, False),
    ("stream_deletion_pending", 409, True),
    ("stream_not_found", 404, True),
    ("transaction_conflict", 409, True),
    ("unavailable", 503, False),
    ("upstream_timeout", 504, False),
]


@pytest.mark.parametrize(("code", "status", "promised"), S2_ERROR_CODES)
def test_every_s2_error_code_is_side_effect_free_as_s2_defines_it(
    code: str, status: int, promised: bool
) -> None:
    """Each official code with its own status is judged as the server defines it; with any other status the
    promise does not hold (the Rust SDK trusts a code only with its own status). Retryable by status alone,
    plus 409 ``transaction_conflict``."""
    assert no_side_effects(server_error(status, code)) is promised
    for other in (400, 409, 500, 503):
        if other != status:
            assert not no_side_effects(server_error(other, code)), other
    transient = status in (408, 429, 499) or status >= 500 or code == "transaction_conflict"
    assert retryable(server_error(status, code)) is transient


def test_an_indefinite_append_is_judged_by_its_last_attempt_but_may_have_applied() -> None:
    """The SDK's AppendIndefiniteFailureError (its last attempt was refused a connection, an earlier one
    may have landed: a unary ledger append caught by an outage) is retried as its last attempt's error is,
    is never side-effect free, and is worded as its last attempt's error."""
    indefinite = AppendIndefiniteFailureError(refused())
    assert retryable(indefinite)
    assert not no_side_effects(indefinite)
    assert not retryable(AppendIndefiniteFailureError(server_error(403, "permission_denied")))
    assert explain(indefinite, CFG).message.startswith(
        "cannot reach S2 at http://127.0.0.1:9: connection refused"
    )


# -- how long to wait --------------------------------------------------------------------------------------


def test_plain_backoff_doubles_up_to_the_cap() -> None:
    """Without jitter the waits are first, 2x, 4x ... capped."""
    plain = Backoff(first=0.1, cap=2.0, jitter=False)
    assert [plain.wait(n, server_error(503)) for n in range(7)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    )
    assert plain.step(10_000) == 2.0


def test_jittered_backoff_stays_under_each_exponential_step() -> None:
    """Full jitter draws each wait from [0, step]; a seeded generator makes the draw reproducible."""
    policy = Backoff(first=0.5, cap=3.0)
    waits = [policy.wait(n, server_error(503), random.Random(n)) for n in range(6)]
    assert all(0 <= w <= policy.step(n) for n, w in enumerate(waits))
    assert waits == [policy.wait(n, server_error(503), random.Random(n)) for n in range(6)]
    assert waits != [policy.step(n) for n in range(6)]


def test_the_policy_comes_from_the_config() -> None:
    """delivery_timeout_ms is the deadline; waits start at retry_delay_ms and double up to 2 s (or to
    retry_delay_ms when that is longer); the default is Kafka's two minutes."""
    assert Patience.of(CFG) == Patience(120.0, Backoff(first=0.1, cap=MAX_WAIT_S))
    slow = CFG.replace(retry_delay_ms=5000, delivery_timeout_ms=30_000)
    assert Patience.of(slow) == Patience(30.0, Backoff(first=5.0, cap=5.0))


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


def test_rate_limit_waits_never_jitter_towards_zero() -> None:
    """A 429 rate_limited retry n waits between its step and twice its step (first * 2**n), over many
    draws: with the default policy, a run of refusals has waited out S2's one-second window by the fourth
    retry."""
    policy = Patience.of(CFG).backoff
    rng = random.Random(11)
    for _ in range(200):
        waits = [policy.wait(n, rate_limit(), rng) for n in range(5)]
        for n, wait in enumerate(waits):
            assert policy.step(n) <= wait <= 2 * policy.step(n)
        assert sum(waits[:4]) >= 1.0
    plain = Backoff(first=0.1, cap=30.0, jitter=False)
    assert [plain.wait(n, rate_limit()) for n in range(3)] == pytest.approx([0.1, 0.2, 0.4])
    assert Backoff(first=1.0, cap=1.5).wait(2, rate_limit(), rng) == pytest.approx(1.5)


def test_rate_limit_waits_honour_the_servers_hint() -> None:
    """A retry-after-ms hint raises the wait to it; a hint shorter than the backoff does not shorten it."""
    policy = Backoff(first=0.1, cap=30.0, jitter=False)
    assert policy.wait(0, rate_limit(retry_after_ms=450)) == pytest.approx(0.45)
    assert policy.wait(2, rate_limit(retry_after_ms=5)) == pytest.approx(0.4)
    assert policy.wait(4, rate_limit(retry_after_ms=2500)) == pytest.approx(2.5)


# -- until when: the deadline, on a fake clock -------------------------------------------------------------


@dataclass
class FakeTime:
    """The retry module's clock and this thread's asyncio.sleep, advanced only by the waits."""

    now: float = 1000.0
    slept: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    """Event loops on other threads (the library's runtime loop) keep the real sleep."""
    fake = FakeTime()
    real_sleep = asyncio.sleep
    mine = threading.get_ident()

    async def sleep(delay: float, result: object = None) -> object:
        if threading.get_ident() != mine:
            return await real_sleep(delay, result)
        fake.slept.append(delay)
        fake.now += delay
        return result

    monkeypatch.setattr(asyncio, "sleep", sleep)
    monkeypatch.setattr(_retry, "_clock", fake.clock)
    return fake


PLAIN = Patience(timeout_s=10.0, backoff=Backoff(first=0.5, cap=2.0, jitter=False))


def test_waits_continue_until_the_deadline_and_the_last_one_is_cut_to_it(fake_time: FakeTime) -> None:
    """From the first failure, waits grow to the cap until the deadline; the last wait ends at the deadline,
    and the next failure gives up."""
    retrying = Retrying(PLAIN, "testing")
    waits = []
    while (delay := retrying.wait(server_error(503))) is not None:
        waits.append(delay)
        fake_time.now += delay + 0.25  # each attempt takes a quarter second
    assert waits == pytest.approx([0.5, 1.0, 2.0, 2.0, 2.0, 1.25])
    assert fake_time.now - 1000.0 == pytest.approx(10.25)  # the deadline, and the attempt after it
    assert retrying.left() <= 0


def test_progress_starts_the_deadline_again(fake_time: FakeTime) -> None:
    """An answer between failures (an ack, a read) ends the outage: the next failure has the whole
    timeout again and the first wait again."""
    retrying = Retrying(PLAIN, "testing")
    for _ in range(3):
        delay = retrying.wait(refused())
        assert delay is not None
        fake_time.now += 9.0
        retrying.progress()
    assert retrying.wait(refused()) == pytest.approx(0.5)
    assert retrying.left() == pytest.approx(10.0)


def test_a_final_error_is_not_waited_on(fake_time: FakeTime) -> None:
    """A 403 gives up at once, without a deadline note."""
    retrying = Retrying(PLAIN, "testing")
    denied = server_error(403, "permission_denied")
    assert retrying.wait(denied) is None
    assert retrying.give_up(denied) is denied
    assert not past_deadline(denied)


def test_past_the_deadline_the_words_name_the_option(fake_time: FakeTime) -> None:
    """Given up at the deadline, the error keeps explain's words and ends with how long it was retried
    and the option to raise; a loop around one that gave up does not retry it again."""
    patience = Patience.of(CFG.replace(delivery_timeout_ms=5000))
    retrying = Retrying(patience, "reading the exactly-once ledger 'x'")
    exc = refused()
    while (delay := retrying.wait(exc)) is not None:
        fake_time.now += delay
    fake_time.now += 0.5
    retrying.give_up(exc)
    words = explain(exc, CFG).message
    assert words.startswith("cannot reach S2 at http://127.0.0.1:9: connection refused")
    assert "still failing after 5.5 s of retries, past the delivery deadline" in words
    assert "raise s2.delivery-timeout-ms (S2Config.delivery_timeout_ms, now 5000)" in words
    assert Retrying(patience, "outer").wait(exc) is None
    retrying.give_up(exc)
    assert len(exc.__notes__) == 1


def test_an_outage_is_logged_once_when_it_starts_and_once_when_it_ends(
    fake_time: FakeTime, caplog: pytest.LogCaptureFixture
) -> None:
    """The first wait says what is retried, the error in words and how long until the deadline; the waits
    after it are DEBUG; the first answer says how long it took."""
    retrying = Retrying(Patience.of(CFG), "appending to stream 'events'")
    with caplog.at_level(logging.DEBUG, logger="s2_sink._transport.retry"):
        for _ in range(5):
            delay = retrying.wait(refused())
            assert delay is not None
            fake_time.now += delay + 1
        retrying.progress()
        retrying.progress()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("waiting for S2: appending to stream 'events' failed: cannot reach S2 at")
    assert (
        "retrying for up to 120.0 s more (the delivery deadline, s2.delivery-timeout-ms=120000)"
        in warnings[0]
    )
    assert warnings[1].startswith("S2 answers again: appending to stream 'events' succeeded after")
    assert "and 5 retries" in warnings[1]


def test_patiently_returns_the_first_answer(fake_time: FakeTime) -> None:
    """A call failing twice, then answering, returns the answer after two waits."""
    failures = [server_error(503), refused()]

    async def op() -> str:
        if failures:
            raise failures.pop(0)
        return "answer"

    assert asyncio.run(patiently(PLAIN, "testing", op)) == "answer"
    assert fake_time.slept == pytest.approx([0.5, 1.0])


# -- the loops ---------------------------------------------------------------------------------------------


@dataclass
class _FlakyStream:
    """An SDK stream whose appends and reads fail with `errors`, in order, then succeed (reads find
    nothing; the tail stays where it is); `down` makes every call fail as a refused connection."""

    errors: list[Exception]
    name: str = "events"
    appends: list[AppendInput] = field(default_factory=list)
    down: bool = False
    reads: int = 0
    tail: int = 5

    def _fail(self) -> None:
        if self.down:
            raise refused()
        if self.errors:
            raise self.errors.pop(0)

    async def append(self, inp: AppendInput) -> AppendAck:
        self.appends.append(inp)
        self._fail()
        return AppendAck(StreamPosition(0, 0), StreamPosition(1, 0), StreamPosition(1, 0))

    async def check_tail(self) -> StreamPosition:
        if self.down:
            raise refused()
        return StreamPosition(self.tail, 0)

    async def read(self, **_: object) -> ReadBatch:
        self.reads += 1
        self._fail()
        return ReadBatch(records=[])


@dataclass
class _Basin:
    """An SDK basin holding one `_FlakyStream`."""

    held: _FlakyStream
    name: str = "test-basin"

    def stream(self, name: str) -> _FlakyStream:
        return self.held

    async def create_stream(self, name: str, **_: object) -> None:
        if self.held.down:
            raise refused()

    async def get_stream_config(self, name: str) -> StreamConfig:
        return StreamConfig(retention_policy="infinite")


def _fence(stream: _FlakyStream, patience: Patience = PLAIN) -> object:
    mine = Token(epoch=1, gen=0, writer="abcdef12")
    return asyncio.run(fence_if_older(stream, mine, current="", patience=patience))  # type: ignore[arg-type]


def test_fence_retries_transient_failures(fake_time: FakeTime) -> None:
    """A fence failing with a 503, a reset and a transaction conflict is repeated after each wait, then
    lands."""
    conflict = server_error(409, "transaction_conflict")
    stream = _FlakyStream([server_error(503), S2ClientError("reset"), conflict])
    result = _fence(stream)
    assert fake_time.slept == pytest.approx([0.5, 1.0, 2.0])
    assert result == Token(epoch=1, gen=0, writer="abcdef12")
    assert len(stream.appends) == 4


def test_fence_gives_up_at_the_deadline(fake_time: FakeTime) -> None:
    """Failing for good, the fence is attempted until the deadline and the last failure is raised with
    the deadline's note."""
    stream = _FlakyStream([server_error(503) for _ in range(100)])
    with pytest.raises(S2ServerError) as failed:
        _fence(stream)
    assert failed.value.status_code == 503
    assert sum(fake_time.slept) == pytest.approx(10.0)
    assert past_deadline(failed.value)


def test_fence_does_not_retry_a_final_error(fake_time: FakeTime) -> None:
    """A 403 is raised at once, without waiting."""
    stream = _FlakyStream([server_error(403, "permission_denied")])
    with pytest.raises(S2ServerError) as failed:
        _fence(stream)
    assert failed.value.status_code == 403
    assert fake_time.slept == []


def test_read_back_retries_until_the_deadline(fake_time: FakeTime) -> None:
    """Read-back repeats failed reads until the deadline, then raises; a final error (403) at once."""
    stream = _FlakyStream([server_error(503), S2ClientError("reset")])

    def back(s: _FlakyStream) -> object:
        return asyncio.run(read_back(s, writer="w", start=0, match=lambda _: True, patience=PLAIN))  # type: ignore[arg-type]

    found = back(stream)
    assert (fake_time.slept, stream.reads, found.chunks) == ([0.5, 1.0], 3, [])  # type: ignore[attr-defined]
    fake_time.slept.clear()
    with pytest.raises(S2ClientError):
        back(_FlakyStream([], down=True, tail=5))
    assert sum(fake_time.slept) == pytest.approx(10.0)
    fake_time.slept.clear()
    with pytest.raises(S2ServerError):
        back(_FlakyStream([server_error(403)]))
    assert fake_time.slept == []


def test_sign_in_waits_for_s2(fake_time: FakeTime) -> None:
    """A sign-in whose register cannot be read, then appended to, waits until both answer."""
    stream = _FlakyStream([server_error(503), S2ClientError("reset"), server_error(503)], tail=0)
    me = SignIn("abcdef12", 1, 0, TaskAttempt(0, 7))
    earlier = asyncio.run(sign_in(_Basin(stream), "w", me, patience=PLAIN))  # type: ignore[arg-type]
    assert earlier is False
    assert len(fake_time.slept) == 3


def test_ledger_append_retries_until_the_deadline(fake_time: FakeTime) -> None:
    """A ledger append failing with 503s is repeated until the delivery deadline (re-reading the ledger
    after each: the record may have landed), then fails with a CommitError in words naming the option."""
    stream = _FlakyStream([server_error(503) for _ in range(1000)], tail=0)
    cfg = CFG.replace(delivery_timeout_ms=10_000)

    async def go() -> None:
        ledger = Ledger(_Basin(stream), "w", cfg=cfg)  # type: ignore[arg-type]
        await ledger.load()
        await ledger.append(ledger.opened("run", None))

    with pytest.raises(
        CommitError, match=r"cannot append to the exactly-once ledger '_s2sink/ledger/w'"
    ) as e:
        asyncio.run(go())
    assert "s2.delivery-timeout-ms (S2Config.delivery_timeout_ms, now 10000)" in str(e.value)
    assert sum(fake_time.slept) == pytest.approx(10.0)
    assert len(stream.appends) == len(fake_time.slept) + 1


def test_ledger_append_retries_an_indefinite_failure_and_finds_its_record(fake_time: FakeTime) -> None:
    """The SDK's own retry of a ledger append ends in AppendIndefiniteFailureError (the first attempt may
    have landed, the last could not connect): the ledger waits, re-reads, and appends again."""
    stream = _FlakyStream([AppendIndefiniteFailureError(refused())], tail=0)

    async def go() -> Ledger:
        ledger = Ledger(_Basin(stream), "w", cfg=CFG)  # type: ignore[arg-type]
        await ledger.load()
        await ledger.append(ledger.opened("run", None))
        return ledger

    ledger = asyncio.run(go())
    assert len(stream.appends) == 2
    assert ledger.tail == 1
    assert len(fake_time.slept) == 1


def test_ledger_load_waits_for_s2_to_come_back(fake_time: FakeTime) -> None:
    """The ledger cannot be read for 30 s (connection refused): loading waits, then reads it."""

    @dataclass
    class Outage(_FlakyStream):
        back_at: float = 1030.0

        def _fail(self) -> None:
            if fake_time.now < self.back_at:
                raise refused()

        async def check_tail(self) -> StreamPosition:
            self._fail()
            return StreamPosition(self.tail, 0)

    stream = Outage([], tail=0)
    ledger = Ledger(_Basin(stream), "w", cfg=CFG)  # type: ignore[arg-type]
    assert asyncio.run(ledger.load()).kind == "none"
    assert ledger.tail == 0
    assert 30.0 <= sum(fake_time.slept) <= 30.0 + MAX_WAIT_S
