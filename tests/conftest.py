"""Shared fixtures. Per-area fixtures live in each folder's own conftest.

The S2 the tests talk to is the project's lite server, one per session, unless the environment names another
(`tests/s2_target.py`; ``make test-s2``): then ``lite`` is that S2 and every ``basin`` is created there and
deleted after its test.
"""

from __future__ import annotations

import functools
import ssl
import types
from collections.abc import Iterator

import pytest
import s2_sdk._client

import tests.hypothesis_profiles  # noqa: F401  (registers the fast profile before --hypothesis-profile loads it)
from s2_sink.lite import Faults, LiteServer, RemoteFaults
from s2_sink.testing import fresh_basin
from tests.s2_target import ExternalS2, external_s2


@functools.cache
def _sdk_tls_context(*args: object, **kwargs: object) -> ssl.SSLContext:
    return ssl.create_default_context(*args, **kwargs)  # type: ignore[arg-type]


# Every S2 SDK client builds its connection pool's TLS context when it is made, parsing the system's whole CA
# bundle (some 30 ms of CPU) even for a plain-HTTP endpoint such as the lite server's, and the suite makes
# hundreds of clients. The tests' clients share one context instead, built on first use: an SSLContext is
# made to be shared, and the SDK gives each one the same settings (ALPN h2), so no client behaves otherwise.
s2_sdk._client.ssl = types.SimpleNamespace(**{**vars(ssl), "create_default_context": _sdk_tls_context})  # type: ignore[assignment]


def pytest_report_header() -> str:
    target = external_s2()
    if target is None:
        return "S2: the project's lite server"
    return f"S2: {target.account_endpoint} (basins {target.basin_prefix}-*, deleted after each test)"


@pytest.fixture(scope="session", autouse=True)
def _delete_basins_made_in_another_s2() -> Iterator[None]:
    """Against another S2, the run deletes at its end every basin it created there."""
    yield
    target = external_s2()
    if target is not None:
        target.delete_this_runs_basins()


@pytest.fixture(scope="session")
def lite() -> Iterator[LiteServer | ExternalS2]:
    """One in-process lite S2 server for the whole session (fault hooks allowed, none armed), or the S2 that
    the environment names."""
    target = external_s2()
    if target is not None:
        yield target
        return
    with LiteServer(faults=True) as srv:
        yield srv


@pytest.fixture
def lite_faults(lite: LiteServer | ExternalS2) -> Iterator[Faults | RemoteFaults]:
    """The session server's fault hooks, disarmed again after the test."""
    lite.faults.clear()  # against another S2: skips, naming the fault hooks
    yield lite.faults
    lite.faults.clear()


@pytest.fixture
def basin(lite: LiteServer | ExternalS2) -> Iterator[str]:
    """A fresh, uniquely named basin on the session server with create_stream_on_append=True."""
    if isinstance(lite, ExternalS2):
        name = lite.unique_basin()
        lite.create_basin(name, {"create_stream_on_append": True})
        yield name
        lite.delete_basin(name)
        return
    yield fresh_basin(lite.endpoint)
