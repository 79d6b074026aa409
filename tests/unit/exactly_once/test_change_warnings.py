"""A restart's change of the writer's configuration is logged once per front door, against the lite server
(no Spark): `S2Writer`'s coordinator across starts that skip the batches its ledger has and the start that
writes, and ``format("s2")``'s planning across the executions after the change."""

from __future__ import annotations

import logging

import pytest

from s2_sink._exactly_once import shape as _shape
from s2_sink._exactly_once import sink_run as _sink_run
from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.shape import WriteShape
from s2_sink._exactly_once.sink_run import commit_sink_run, open_sink_run
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin

BEFORE = WriteShape("InsertEncoder(format='json')", "stream=events", "fail", None)
AFTER = WriteShape("InsertEncoder(format='json')", "stream=events", "skip", None)


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "under a changed configuration" in r.getMessage()]


def test_s2writer_logs_a_change_once_across_the_starts_that_skip(
    lite: LiteServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Batch 0 committed under on_error="fail"; the query restarts twice under "skip", replaying batch 0
    each time (the ledger has it: skipped, nothing recorded), then writes batch 1. One warning, at batch 0."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    first = Coordinator(cfg, "w", query_id="q", static_streams=["events"], shape=BEFORE)
    assert first.begin_batch(0, "run-1") is not None
    first.commit_batch(0, {"events": 0})
    changed = Coordinator(cfg, "w", query_id="q", static_streams=["events"], shape=AFTER)
    with caplog.at_level(logging.WARNING, logger=_shape.__name__):
        assert changed.begin_batch(0, "run-2") is None
        assert changed.begin_batch(0, "run-3") is None
        assert changed.begin_batch(1, "run-3") is not None
    [said] = _said(caplog)
    assert "writer w goes on from its ledger at micro-batch 0" in said
    assert "on_error 'fail' -> 'skip'" in said


def test_format_s2_logs_a_change_once_across_the_executions_after_it(
    lite: LiteServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Batch 0 committed under on_error="fail"; the next executions, each planned by a new driver process,
    run under "skip": the first one says so, naming batch 1, and the ones after it (the change recorded) do
    not."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    _sink_run._planned.clear()
    run = open_sink_run(cfg, "q1", "q1", ["events"], shape=BEFORE)
    commit_sink_run(cfg, "q1", run, 0, {"events": 0}, query_id="q1", shape=BEFORE)
    with caplog.at_level(logging.WARNING, logger=_shape.__name__):
        for batch in (1, 2):
            _sink_run._planned.clear()  # a restart: a new process
            run = open_sink_run(cfg, "q1", "q1", ["events"], shape=AFTER)
            commit_sink_run(cfg, "q1", run, batch, {"events": 0}, query_id="q1", shape=AFTER)
    [said] = _said(caplog)
    assert "writer q1 goes on from its ledger at micro-batch 1" in said
