"""Shared fixtures. Per-area fixtures live in each folder's own conftest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from s2_sink.lite import Faults, LiteServer, RemoteFaults
from s2_sink.testing import fresh_basin


@pytest.fixture(scope="session")
def lite() -> Iterator[LiteServer]:
    """One in-process lite S2 server for the whole session (fault hooks allowed, none armed)."""
    with LiteServer(faults=True) as srv:
        yield srv


@pytest.fixture
def lite_faults(lite: LiteServer) -> Iterator[Faults | RemoteFaults]:
    """The session server's fault hooks, disarmed again after the test."""
    lite.faults.clear()
    yield lite.faults
    lite.faults.clear()


@pytest.fixture
def basin(lite: LiteServer) -> str:
    """A fresh, uniquely named basin on the session server with create_stream_on_append=True."""
    return fresh_basin(lite.endpoint)
