"""The driver's preflight against real servers: the lite server (missing basin, missing stream, a refused
token), a server that is not S2 and one that never answers; called as S2Writer and format("s2") call it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from s2_sink._read.rows.schemas import RAW_SCHEMA
from s2_sink._transport.explain import TOKEN_HINT
from s2_sink._transport.preflight import preflight_read, preflight_write
from s2_sink.config import S2Config
from s2_sink.datasource import S2DataSource
from s2_sink.errors import ConfigError, PreflightError
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin, unique_basin_name
from tests.unit.transport._odd_servers import plain_http2_404, silent

_ONE_COL = StructType([StructField("id", LongType())])


def _cfg(endpoint: str, basin: str, **kw: Any) -> S2Config:
    base: dict[str, Any] = {
        "access_token": "test",
        "max_retries": 0,
        "retry_delay_ms": 10,
        "delivery_timeout_ms": 0,
    }
    return S2Config(basin=basin, account_endpoint=endpoint, basin_endpoint=endpoint, **{**base, **kw})


def _options(endpoint: str, basin: str, **extra: str) -> dict[str, str]:
    return {
        "s2.basin": basin,
        "s2.endpoints.account": endpoint,
        "s2.endpoints.basin": endpoint,
        "s2.max-retries": "0",
        "s2.delivery-timeout-ms": "0",
        **extra,
    }


@pytest.fixture(scope="module")
def guarded() -> Iterator[LiteServer]:
    """A lite server that accepts only the token ``right-token``."""
    with LiteServer(token="right-token") as srv:
        yield srv


def test_a_good_setup_passes_and_creates_nothing(lite: LiteServer) -> None:
    """The write preflight passes for a routed write, for a missing stream that create_streams or the basin's
    create_stream_on_append will create, and the preflight itself creates no stream."""
    auto = fresh_basin(lite.endpoint, create_stream_on_append=True)
    preflight_write(_cfg(lite.endpoint, auto), ["made-by-the-first-append"], what="S2Writer")
    basin = fresh_basin(lite.endpoint, create_stream_on_append=False)
    cfg = _cfg(lite.endpoint, basin)
    preflight_write(cfg, [], what="S2Writer")
    preflight_write(cfg.replace(create_streams=True), ["later"], what="S2Writer")
    with pytest.raises(PreflightError):  # "later" was not created by the check above
        preflight_read(cfg, ["later"], what="format('s2') read")


@pytest.mark.parametrize("streams", [["events"], []], ids=["known stream", "routed"])
def test_a_missing_basin_fails_naming_endpoint_basin_and_fix(lite: LiteServer, streams: list[str]) -> None:
    """A basin that does not exist: one message with the endpoint, the basin, and that it must be created
    (create_streams cannot), before any task; also for a routed write, and although S2 lists a missing
    basin's streams as none (s2-lite: lite/src/backend/streams.rs, list_streams, a key-range scan) rather
    than a 404."""
    missing = unique_basin_name()
    with pytest.raises(PreflightError) as info:
        preflight_write(_cfg(lite.endpoint, missing, create_streams=True), streams, what="S2Writer")
    text = str(info.value)
    assert text.startswith(f"S2Writer: basin {missing!r} does not exist at {lite.endpoint}: create it first")
    assert "create_streams creates streams, not basins" in text
    assert text.endswith("(checked on the driver before any task ran)")


def test_a_missing_stream_without_create_streams_fails_with_the_fix(lite: LiteServer) -> None:
    """A target stream that does not exist and will not be created: named, with create_streams as the fix;
    a read of a missing stream is refused the same way, with the reader's fix."""
    basin = fresh_basin(lite.endpoint, create_stream_on_append=False)
    with pytest.raises(PreflightError) as write:
        preflight_write(_cfg(lite.endpoint, basin), ["events"], what="S2Writer")
    assert (
        f"S2Writer: stream 'events' does not exist in basin {basin!r} at {lite.endpoint}: create it, or set "
        "create_streams=True (s2.create-streams)"
    ) in str(write.value)
    with pytest.raises(PreflightError) as read:
        preflight_read(_cfg(lite.endpoint, basin), ["events"], what="format('s2') read")
    assert f"stream 'events' does not exist in basin {basin!r}" in str(read.value)
    assert "check s2.stream / s2.streams" in str(read.value)


def test_a_refused_token_fails_with_the_common_hint(guarded: LiteServer) -> None:
    """A wrong token fails the preflight with the same 401 words as every other path."""
    basin = fresh_basin(guarded.endpoint, token="right-token")
    with pytest.raises(PreflightError) as info:
        preflight_write(
            _cfg(guarded.endpoint, basin, access_token="wrong-token"), ["events"], what="S2Writer"
        )
    assert f"refused the access token (401 authn): {TOKEN_HINT}" in str(info.value)
    assert "wrong-token" not in str(info.value)


def test_not_s2_and_silent_endpoints_fail_fast() -> None:
    """A server that is not S2 is called so; one that never answers fails within one attempt's timeouts
    (without retries: s2.delivery-timeout-ms=0)."""
    with (
        plain_http2_404() as endpoint,
        pytest.raises(PreflightError, match="does not look like an S2 server"),
    ):
        preflight_write(_cfg(endpoint, "some-basin"), ["events"], what="S2Writer")
    with silent() as endpoint:
        cfg = _cfg(endpoint, "some-basin", request_timeout_ms=300, connect_timeout_ms=200)
        started = time.monotonic()
        with pytest.raises(PreflightError, match=f"cannot reach S2 at {endpoint}: no answer"):
            preflight_write(cfg, ["events"], what="S2Writer")
        assert time.monotonic() - started < 0.5 + 3.0  # one attempt, and a loaded machine's scheduling


def test_format_s2_plans_with_the_preflight(lite: LiteServer) -> None:
    """format("s2") writes and reads run the preflight while planning (on the driver); s2.preflight=false
    skips it, and a value that is not a boolean is refused."""
    basin = fresh_basin(lite.endpoint, create_stream_on_append=False)
    source = S2DataSource(_options(lite.endpoint, basin, **{"s2.stream": "ghost"}))
    with pytest.raises(PreflightError, match=r"format\('s2'\) write: stream 'ghost' does not exist"):
        source.writer(_ONE_COL, False)
    with pytest.raises(PreflightError, match=r"format\('s2'\) read: stream 'ghost' does not exist"):
        source.reader(RAW_SCHEMA)
    created = S2DataSource(
        _options(lite.endpoint, basin, **{"s2.stream": "ghost", "s2.create-streams": "true"})
    )
    assert created.writer(_ONE_COL, False) is not None
    skipped = S2DataSource(_options(lite.endpoint, basin, **{"s2.stream": "ghost", "S2.Preflight": "false"}))
    assert skipped.writer(_ONE_COL, False) is not None
    with pytest.raises(ConfigError, match=r"s2\.preflight='maybe' must be true or false"):
        S2DataSource(
            _options(lite.endpoint, basin, **{"s2.stream": "ghost", "s2.preflight": "maybe"})
        ).reader(RAW_SCHEMA)
