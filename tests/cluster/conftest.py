"""Fixtures of the cluster suite: a Spark standalone cluster (a master and two workers, each its own JVM)
and a lite server in its own process, both for the whole session and both stopped even on failure."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from s2_sink.lite import LiteServer
from tests.cluster._cluster import StandaloneCluster
from tests.cluster._scenario import RESULTS


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """A master and two workers (1 core, 1 GiB each) on 127.0.0.1; all killed, executors too, at the end."""
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


@pytest.fixture(scope="session")
def cluster_server() -> Iterator[LiteServer]:
    """A lite server in its own process, reachable from the driver and executor processes."""
    with LiteServer(subprocess=True) as srv:
        yield srv


@pytest.fixture
def scenario_dir(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path:
    """A directory per scenario for its input, checkpoint, crash plan and driver log."""
    return tmp_path_factory.mktemp(request.node.name[:40])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Cluster scenarios (marked ``cluster``) run only when asked: ``make test-cluster`` sets
    ``S2SINK_CLUSTER=1``. They take minutes and most of this machine's cores."""
    if os.environ.get("S2SINK_CLUSTER") == "1":
        return
    skip = pytest.mark.skip(reason="cluster scenario: run with make test-cluster (S2SINK_CLUSTER=1)")
    for item in items:
        if item.get_closest_marker("cluster") is not None:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The counts of every cluster scenario, expected failures included (their output is not shown)."""
    if RESULTS:
        terminalreporter.section("cluster scenarios")
        for line in RESULTS:
            terminalreporter.write_line(line)
