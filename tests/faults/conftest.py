"""Fixtures of the exactly-once fault suite: a lite server in a child process, faults allowed."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from s2_sink.lite import LiteServer


@pytest.fixture(scope="session")
def eo_server() -> Iterator[LiteServer]:
    """A lite server in its own process (so Spark drivers in other processes can reach it), faults allowed."""
    with LiteServer(subprocess=True, faults=True) as srv:
        yield srv


@pytest.fixture
def tmp(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A private work directory (not pytest's tmp_path: other pytest sessions on the machine rotate those
    away, and a driver restart needs its checkpoint for minutes). Kept on failure for the driver logs."""
    path = Path(tempfile.mkdtemp(prefix="s2sink-faults-"))
    yield path
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.passed:
        shutil.rmtree(path, ignore_errors=True)
    else:
        print(f"driver logs kept in {path}")


@pytest.fixture(autouse=True)
def _no_leftover_faults(eo_server: LiteServer) -> Iterator[None]:
    """Every test starts and ends with no fault armed."""
    eo_server.faults.clear()
    yield
    eo_server.faults.clear()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Heavy fault scenarios (marked ``slow``) run only when asked: ``-m slow`` or ``S2SINK_SLOW=1``."""
    if config.getoption("-m") or os.environ.get("S2SINK_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow fault scenario: run with -m slow or S2SINK_SLOW=1")
    for item in items:
        if "slow" in item.keywords and "tests/faults" in str(item.fspath):
            item.add_marker(skip)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    """Keep each phase's report on the item, so fixtures can tell whether the test passed."""
    report: pytest.TestReport = yield
    setattr(item, f"rep_{report.when}", report)
    return report
