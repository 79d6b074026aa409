"""Fixtures of the exactly-once fault suite: a lite server in a child process, faults allowed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from s2_sink.lite import LiteServer


@pytest.fixture(scope="session")
def eo_server() -> Iterator[LiteServer]:
    """A lite server in its own process (so Spark drivers in other processes can reach it), faults allowed."""
    with LiteServer(subprocess=True, faults=True) as srv:
        yield srv


@pytest.fixture(autouse=True)
def _no_leftover_faults(eo_server: LiteServer) -> Iterator[None]:
    """Every test starts and ends with no fault armed."""
    eo_server.faults.clear()
    yield
    eo_server.faults.clear()
