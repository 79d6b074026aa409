"""Failures in words, met for real: a lite server with a token, missing basins and streams, a server that is
not S2, a host that does not resolve, a refused port and an endpoint that never answers."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from s2_sink._exactly_once.ledger import Ledger
from s2_sink._read.planning import lookups as _lookups
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.explain import TOKEN_HINT
from s2_sink._transport.runtime import get_pool
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import WritePlan
from s2_sink.cli._command import DENIED, NOT_FOUND
from s2_sink.cli._command import explain as cli_explain
from s2_sink.config import S2Config
from s2_sink.errors import CommitError, ReadError, WriteError
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin, unique_basin_name
from tests.unit.transport._odd_servers import plain_http2_404, silent
from tests.unit.write.test_partition_writer import ctx, frame

_FAST: dict[str, Any] = {"max_retries": 0, "delivery_timeout_ms": 0, "retry_delay_ms": 10}


def _cfg(endpoint: str, basin: str, **kw: Any) -> S2Config:
    return S2Config(
        basin=basin,
        stream="events",
        account_endpoint=endpoint,
        basin_endpoint=endpoint,
        **{"access_token": "test", **kw},
    )


def _write(cfg: S2Config) -> None:
    list(write_partition(WritePlan(cfg=cfg, batch_id=0, stream=cfg.stream), [frame([b"a"])], ctx()))


def _load_ledger(cfg: S2Config) -> None:
    async def load() -> None:
        await Ledger(get_pool().client(cfg).basin(cfg.basin), "w", cfg=cfg).load()

    _runtime.run(load())


@pytest.fixture(scope="module")
def guarded() -> Iterator[LiteServer]:
    """A lite server that accepts only the token ``right-token``."""
    with LiteServer(token="right-token") as srv:
        yield srv


def test_a_refused_token_reads_the_same_on_every_path(guarded: LiteServer) -> None:
    """A 401 names the basin and endpoint and gives one fix, whether the writer, the exactly-once ledger,
    the reader or the CLI met it; the token itself appears nowhere."""
    basin = fresh_basin(guarded.endpoint, token="right-token")
    cfg = _cfg(guarded.endpoint, basin, access_token="wrong-token", **_FAST)
    expected = f"basin {basin!r} at {guarded.endpoint} refused the access token (401 authn): {TOKEN_HINT}"
    messages = []
    with pytest.raises(WriteError) as write:
        _write(cfg)
    messages.append(str(write.value))
    with pytest.raises(CommitError) as ledger:
        _load_ledger(cfg)
    messages.append(str(ledger.value))
    with pytest.raises(ReadError) as read:
        _lookups.listed_epochs(cfg, "")
    messages.append(str(read.value))
    cli = cli_explain(read.value.__cause__, cfg, None)  # type: ignore[arg-type]  # the SDK's 401
    assert cli.code == DENIED
    messages.append(str(cli))
    for message in messages:
        assert expected in message
        assert "wrong-token" not in message
    assert "cannot read the exactly-once ledger '_s2sink/ledger/w'" in messages[1]


def test_a_missing_basin_is_not_a_missing_stream(lite: LiteServer) -> None:
    """A missing basin says so and how to create one (create_streams cannot); a missing stream says
    create_streams can create it; the CLI gives both the not-found exit code."""
    missing = unique_basin_name()
    with pytest.raises(WriteError) as no_basin:
        _write(_cfg(lite.endpoint, missing, **_FAST))
    text = str(no_basin.value)
    assert f"basin {missing!r} does not exist at {lite.endpoint}: create it first" in text
    assert "create_streams creates streams, not basins" in text
    assert f"s2-sink-lite --basin {missing}" in text

    basin = fresh_basin(lite.endpoint, create_stream_on_append=False)
    with pytest.raises(WriteError) as no_stream:
        _write(_cfg(lite.endpoint, basin, **_FAST))
    text = str(no_stream.value)
    assert f"stream 'events' does not exist in basin {basin!r} at {lite.endpoint}" in text
    assert "set create_streams=True (s2.create-streams)" in text
    cause = no_stream.value.__cause__
    assert cause is not None
    assert cli_explain(cause, _cfg(lite.endpoint, basin), "events").code == NOT_FOUND  # type: ignore[arg-type]


def test_a_server_that_is_not_s2_is_told_apart_from_a_missing_stream() -> None:
    """A 404 without an S2 error code (a web server or proxy at the endpoint) is reported as "not an S2
    server", naming the endpoint, on the write and the read path."""
    with plain_http2_404() as endpoint:
        cfg = _cfg(endpoint, "some-basin", **_FAST)
        with pytest.raises(WriteError) as write:
            _write(cfg)
        with pytest.raises(ReadError) as read:
            _lookups.tails(cfg, ["events"])
    for err in (write.value, read.value):
        assert f"{endpoint} answered 404 without an S2 error code" in str(err)
        assert "does not look like an S2 server" in str(err)
        assert "does not exist" not in str(err)


def test_transport_failures_name_the_endpoint_and_the_host() -> None:
    """A refused connection names the endpoint; a host that does not resolve is named too."""
    with pytest.raises(WriteError, match=r"cannot reach S2 at http://127\.0\.0\.1:1: connection refused"):
        _write(_cfg("http://127.0.0.1:1", "some-basin", **_FAST))
    unresolved = "https://no-such-host.invalid"
    with pytest.raises(ReadError) as dns:
        _lookups.listed_epochs(_cfg(unresolved, "some-basin", **_FAST), "")
    assert f"cannot reach S2 at {unresolved}: host 'no-such-host.invalid' does not resolve" in str(dns.value)


@pytest.mark.parametrize(
    ("retries", "deadline_ms"),
    [(0, 0), pytest.param(1, 1500, marks=pytest.mark.waits)],  # waits the bound
)
def test_a_silent_endpoint_fails_within_the_timeout_bound(retries: int, deadline_ms: int) -> None:
    """A server that accepts TCP and never replies fails a task's writes and a driver call within the
    delivery deadline plus one attempt ((max_retries + 1) x (connect + request timeout) for a unary call;
    the ack deadline of 2 x request + 1 s for an append): the bound docs/operations.md states. The words
    name the timeouts and the deadline."""
    timeouts = {"request_timeout_ms": 300, "connect_timeout_ms": 200, "retry_delay_ms": 10}
    with silent() as endpoint:
        cfg = _cfg(endpoint, "some-basin", max_retries=retries, delivery_timeout_ms=deadline_ms, **timeouts)
        started = time.monotonic()
        with pytest.raises(WriteError) as write:
            _write(cfg)
        write_s = time.monotonic() - started
        started = time.monotonic()
        with pytest.raises(ReadError) as read:
            _lookups.tails(cfg, ["events"])
        read_s = time.monotonic() - started
    slack = 3.0  # scheduling on a loaded machine
    assert write_s <= deadline_ms / 1000 + (2 * 0.3 + 1) + 0.2 + slack
    assert read_s <= deadline_ms / 1000 + (retries + 1) * 0.5 + slack
    for err in (write.value, read.value):
        assert f"cannot reach S2 at {endpoint}: no answer within s2.connect-timeout-ms=200" in str(err)
        assert f"s2.delivery-timeout-ms (S2Config.delivery_timeout_ms, now {deadline_ms})" in str(err)
        assert "s2.request-timeout-ms=300 per attempt" in str(err)
