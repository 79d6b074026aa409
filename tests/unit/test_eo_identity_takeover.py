"""Identity per destination and decided take-overs, on the real coordinator against the lite server.

A writer's default identity covers its destination, so writers of one query each keep a ledger; an identity
whose ledger is empty goes on from the one that wrote the query's batches before it (the bare query id of
older versions, or a writer_id spelled anew on the same checkpoint) instead of writing them again.
"""

from __future__ import annotations

import pytest

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.fencing import Token, writer_hash
from s2_sink._exactly_once.ledger import Ledger
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.session_pool import get_pool
from s2_sink.errors import WriterConflictError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin

DEST = "basin=b stream=events dlq=-"


def _ledger_state(cfg, writer_id):  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        ledger = Ledger(get_pool().client(cfg).basin(cfg.basin), writer_id, cfg=cfg)
        return await ledger.load()

    return _runtime.run(go())


def test_an_identity_goes_on_from_the_bare_query_id_ledger_of_older_versions(lite: LiteServer) -> None:
    """A writer of an older version (identity = the query id) committed batch 0 and announced batch 1, then
    died; the upgraded writer (identity = query id + destination) takes that ledger over: batch 0 is not
    written again, batch 1 is a recovery under the old tag hash (so the old run's chunks read back as its
    own), in a higher epoch. A second destination of the same query finds the ledger taken and starts
    fresh."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    old = Coordinator(cfg, "q1", query_id="q1", static_streams=["events"])
    assert old.begin_batch(0) is not None
    old.commit_batch(0, {"events": 5})
    assert old.begin_batch(1) is not None  # announced, then the driver dies

    new = Coordinator(
        cfg, "q1.aaaa1111", query_id="q1", static_streams=["events"], destination=DEST, predecessor="q1"
    )
    assert new.begin_batch(0) is None  # committed by the old identity: nothing written again
    replay = Coordinator(
        cfg, "q1.aaaa1111", query_id="q1", static_streams=["events"], destination=DEST, predecessor="q1"
    ).begin_batch(1)
    assert replay is not None
    assert replay.recovery
    token = Token.parse(replay.token)
    assert token.writer == writer_hash("q1")
    assert token.epoch > 1
    assert replay.dedupe.starts.inline == {"events": 5}
    assert _ledger_state(cfg, "q1").moved_to == "q1.aaaa1111"

    other = Coordinator(
        cfg,
        "q1.bbbb2222",
        query_id="q1",
        static_streams=["events"],
        destination="basin=b stream=audit dlq=-",
        predecessor="q1",
    )
    fresh = other.begin_batch(1)
    assert fresh is not None
    assert not fresh.recovery
    assert Token.parse(fresh.token).writer == writer_hash("q1.bbbb2222")


def test_a_new_writer_id_on_the_same_checkpoint_goes_on_exactly_once(lite: LiteServer) -> None:
    """The query (id known) restarts from its checkpoint under another explicit writer_id while its last
    batch is half-written: the new identity takes the old ledger over and recovers that batch; the old id,
    used again, is refused naming the one that took it over."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    first = Coordinator(cfg, "orders-v1", query_id="q1", static_streams=["events"], destination=DEST)
    assert first.begin_batch(0) is not None
    first.commit_batch(0, {"events": 5})
    assert first.begin_batch(1) is not None

    renamed = Coordinator(cfg, "orders-v2", query_id="q1", static_streams=["events"], destination=DEST)
    assert renamed.begin_batch(0) is None
    plan = Coordinator(
        cfg, "orders-v2", query_id="q1", static_streams=["events"], destination=DEST
    ).begin_batch(1)
    assert plan is not None
    assert plan.recovery
    assert Token.parse(plan.token).writer == writer_hash("orders-v1")

    back = Coordinator(cfg, "orders-v1", query_id="q1", static_streams=["events"], destination=DEST)
    with pytest.raises(WriterConflictError, match="taken over by writer_id 'orders-v2'"):
        back.begin_batch(1)


def test_without_a_query_id_a_batch_in_flight_under_another_id_is_refused(lite: LiteServer) -> None:
    """Where the query id cannot be read (Spark Connect), a new writer_id whose destination has a batch in
    flight under another writer_id cannot tell a rename from another query: it refuses, naming both ids and
    the fix, instead of taking the streams over and writing that batch a second time."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    first = Coordinator(cfg, "nb-orders", query_id=None, static_streams=["events"], destination=DEST)
    assert first.begin_batch(0) is not None  # announced, then the notebook's query fails

    renamed = Coordinator(cfg, "nb-orders-2", query_id=None, static_streams=["events"], destination=DEST)
    with pytest.raises(WriterConflictError, match=r"'nb-orders-2'.*'nb-orders'.*writer_id='nb-orders'"):
        renamed.begin_batch(0)


def test_an_idle_writer_of_another_query_does_not_block_a_new_one(lite: LiteServer) -> None:
    """A finished writer of another query to the same destination (its last batch committed) is no
    predecessor: a new query's writer starts fresh."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    done = Coordinator(cfg, "job-2025", query_id="q-old", static_streams=["events"], destination=DEST)
    assert done.begin_batch(0) is not None
    done.commit_batch(0, {"events": 3})

    new = Coordinator(cfg, "job-2026", query_id="q-new", static_streams=["events"], destination=DEST)
    plan = new.begin_batch(0)
    assert plan is not None
    assert not plan.recovery
    assert Token.parse(plan.token).writer == writer_hash("job-2026")


def test_one_explicit_writer_id_for_two_destinations_is_refused(lite: LiteServer) -> None:
    """Two writers sharing one explicit writer_id would share a ledger and skip each other's batches: the
    second destination is refused, naming both destinations."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events", "audit"]))
    a = Coordinator(cfg, "shared", query_id="q1", static_streams=["events"], destination=DEST)
    assert a.begin_batch(0) is not None
    a.commit_batch(0, {"events": 1})
    b = Coordinator(
        cfg, "shared", query_id="q1", static_streams=["audit"], destination="basin=b stream=audit dlq=-"
    )
    with pytest.raises(WriterConflictError, match=r"stream=events.*stream=audit"):
        b.begin_batch(0)
