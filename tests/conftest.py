"""Shared fixtures. Per-area fixtures live in each folder's own conftest.

The S2 the tests talk to is the project's lite server, one per session, unless the environment names another
(`tests/s2_target.py`; ``make test-s2``): then ``lite`` is that S2 and every ``basin`` is created there and
deleted after its test.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import tests.hypothesis_profiles  # noqa: F401  (registers the fast profile before --hypothesis-profile loads it)
from s2_sink.lite import Faults, LiteServer, RemoteFaults
from s2_sink.testing import fresh_basin
from tests.s2_target import ExternalS2, external_s2


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
