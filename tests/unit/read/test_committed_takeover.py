"""Read-committed readers across take-overs and query ids, against the lite server (no Spark): a reader bound
to a writer whose ledger another identity took over follows ``moved_to`` to the current ledger (logged
once), and a reader bound to a streaming query id finds that query's one ledger, or names them all."""

from __future__ import annotations

import logging

import pytest

from s2_sink._read.planning.committed import CommittedEnds
from s2_sink.errors import ConfigError
from s2_sink.lite import LiteServer
from s2_sink.writer import S2Writer
from tests.faults._support import cfg_for, make_basin
from tests.sim._scenario import Row
from tests.unit.exactly_once._writer import facts, write_batch

ROWS = [Row(b'{"id":%d}' % i) for i in range(6)]


@pytest.mark.parametrize("old_id", [None, "orders-v1"])
def test_a_reader_of_a_renamed_writer_follows_it_to_its_new_ledger(
    lite: LiteServer, caplog: pytest.LogCaptureFixture, old_id: str | None
) -> None:
    """The query's writer (its default identity, or writer_id "orders-v1") committed batch 0; the query
    restarts under writer_id "orders-v2", which takes the ledger over and commits batch 1. A reader bound to
    the old identity reads up to batch 1's commit, as does one bound to the new id; the hop is logged once
    (before: the old reader kept batch 0's ends and stopped advancing, saying nothing)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    first = S2Writer(cfg, None, writer_id=old_id, preflight=False)
    assert write_batch(first, 0, [ROWS[:3]], facts("run-1")) == "written"
    bound = old_id or "q1"
    old = CommittedEnds(cfg, bound)
    before = old.fetch()["events"]
    renamed = S2Writer(cfg, None, writer_id="orders-v2", preflight=False)
    assert write_batch(renamed, 1, [ROWS[3:]], facts("run-2")) == "written"
    with caplog.at_level(logging.WARNING, logger="s2_sink._read.planning.committed"):
        now = old.fetch()["events"]
        assert old.fetch()["events"] == now
    assert now == before + 1 + 3  # the new run's fence record, then batch 1's three records
    assert CommittedEnds(cfg, "orders-v2").fetch()["events"] == now
    hops = [r.getMessage() for r in caplog.records if "taken over" in r.getMessage()]
    assert hops == [
        f"read-committed (s2.committed-by={bound}): writer_id {bound!r} was taken over by writer_id "
        "'orders-v2': reading up to its commits"
    ]
    assert old.current == "orders-v2"


def test_a_reader_bound_to_a_query_id_finds_the_querys_writer(lite: LiteServer) -> None:
    """A query whose one writer has an explicit writer_id: a reader bound to its query id reads up to that
    writer's commits (before: ConfigError, no ledger named by the query id)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    writer = S2Writer(cfg, None, writer_id="orders", preflight=False)
    assert write_batch(writer, 0, [ROWS], facts("run-1", query_id="q7")) == "written"
    assert CommittedEnds(cfg, "q7").fetch() == CommittedEnds(cfg, "orders").fetch()


def test_a_query_id_of_several_writers_is_a_config_error_naming_them(lite: LiteServer) -> None:
    """Two writers of one query (each with its writer_id): the query id names neither; the error lists
    both for s2.committed-by. An unknown id lists the basin's writers."""
    basin = make_basin(lite.endpoint, ["a", "b"])
    cfg = cfg_for(lite.endpoint, basin)
    for stream in ("a", "b"):
        writer = S2Writer(cfg.replace(stream=stream), None, writer_id=f"to-{stream}", preflight=False)
        assert write_batch(writer, 0, [ROWS], facts("run-1", query_id="q8")) == "written"
    with pytest.raises(
        ConfigError, match=r"streaming query id of several .*'to-a', 'to-b'.*s2\.committed-by"
    ):
        CommittedEnds(cfg, "q8").fetch()
    with pytest.raises(ConfigError, match=r"no ledger stream '_s2sink/ledger/q9'.*writers: 'to-a', 'to-b'"):
        CommittedEnds(cfg, "q9").fetch()
