"""What an exactly-once identity is, and what a restart may change, through `S2Writer`'s own delivery mode
against the lite server (no Spark): `S2Writer.mode.prepare` with the session's facts, the real task write
(`write_partition`) and `S2Writer.mode.commit`, as `S2Writer.__call__` drives them.

The identity is the streaming query id or an explicit ``writer_id``; configuration is not part of it. So a
restart under a changed writer goes on from the same ledger: a batch the ledger committed is skipped
whatever changed, a batch in flight is recovered where the change cannot alter what its rows became, and
refused (naming the setting, both values and the fix) where it can. A query's writers are told apart by
their ``writer_id``: a second writer under one identity in a micro-batch is refused before it writes, and a
renamed writer takes its ledger over on evidence (the routing it recorded), exclusively.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from s2_sdk import S2, AppendAck, S2Basin, S2Stream

from s2_sink._exactly_once.fencing import Token, writer_hash
from s2_sink._exactly_once.identity import SessionFacts
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import SessionPool, get_pool, install_pool, make_client
from s2_sink.config import S2Config
from s2_sink.encoders import InsertEncoder
from s2_sink.errors import ConfigError, EncodeError, WriterConflictError
from s2_sink.lite import LiteServer
from s2_sink.writer import S2Writer
from tests.faults._support import cfg_for, make_basin
from tests.sim._scenario import Row
from tests.unit.exactly_once._writer import bodies, facts, ledger_state, write_batch, write_tasks

GOOD = [Row(b'{"id":%d}' % i) for i in range(12)]
BAD = Row(b'{"id":null}', error="upsert key column 'id' is null")


def _half_written(cfg: S2Config, **kw: Any) -> S2Writer:
    """Batch 0 of query q1 under `kw`'s configuration, half written: the task of the good rows wrote them,
    then the driver died (the batch is announced in the ledger, not committed)."""
    first = S2Writer(cfg, None, preflight=False, **kw)
    job = first.mode.prepare(0, facts("run-1"))
    assert job is not None
    first._create_known_streams()
    write_tasks(first, job, 0, [GOOD])
    return first


def test_a_dead_letter_stream_added_at_the_restart_recovers_the_batch_in_flight(lite: LiteServer) -> None:
    """The issue's first case, without Spark: batch 0 fails on its one bad row after the good rows were
    written; the restart adds ``on_error="dlq"`` and a dead-letter stream. The identity (the query id) is the
    same, so the restart goes on from the ledger and recovers batch 0: every good row once, the bad row one
    dead letter (before: the new configuration was a new identity, and the good rows were written twice)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events", "dead"]), batch_max_records=2)
    first = S2Writer(cfg, None, preflight=False)  # on_error="fail"
    with pytest.raises(EncodeError):  # the good rows' task wrote them, the bad row's task fails for good
        write_batch(first, 0, [GOOD, [BAD]], facts("run-1"))
    assert bodies(lite, cfg.basin, "events") == Counter(r.body for r in GOOD)
    fixed = S2Writer(cfg, None, on_error="dlq", dlq_stream="dead", preflight=False)
    assert write_batch(fixed, 0, [GOOD[5:], [BAD, *GOOD[:5]]], facts("run-2")) == "recovered"
    assert bodies(lite, cfg.basin, "events") == Counter(r.body for r in GOOD)
    assert bodies(lite, cfg.basin, "dead") == Counter([BAD.body])
    assert ledger_state(cfg, "q1").committed == 0


def test_a_ledger_only_batch_is_skipped_whatever_the_restart_changed(lite: LiteServer) -> None:
    """Batch 0 is committed in the ledger but not in Spark's checkpoint (the driver died between the two);
    the restart changes the routing and adds dead letters: Spark replays batch 0 and the writer skips it
    (before: the changed configuration was a new identity and wrote the batch again)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events", "dead"]), stream=None)
    first = S2Writer(cfg.replace(stream="events"), None, preflight=False)
    assert write_batch(first, 0, [GOOD], facts("run-1")) == "written"
    changed = S2Writer(
        cfg.replace(stream="events"), None, shards=2, on_error="dlq", dlq_stream="dead", create_streams=True
    )
    assert write_batch(changed, 0, [GOOD], facts("run-2")) == "skipped"
    assert bodies(lite, cfg.basin, "events") == Counter(r.body for r in GOOD)
    rows = [Row(b'{"id":%d}' % i, stream=f"events/{i % 2}") for i in (100, 101)]
    assert write_batch(changed, 1, [rows], facts("run-2")) == "written"  # and goes on, sharded


@pytest.mark.parametrize(
    ("change", "setting"),
    [
        ({"shards": 2}, "routing (stream_column, shards, S2Config.stream) 'stream=events'"),
        ({"encoder": InsertEncoder(format="raw")}, "encoder 'none (the batches are record frames)'"),
        ({"on_error": "dlq", "dlq_stream": "dead-2"}, "dlq_stream 'dead'"),
    ],
)
def test_a_batch_in_flight_refuses_a_change_its_replay_cannot_recover(
    lite: LiteServer, change: dict[str, Any], setting: str
) -> None:
    """A batch in flight was partly written under one routing, encoder or dead-letter stream; a restart under
    another would write its rows to other streams or as other records than the replay reads back. Refused
    before anything is written, naming the setting, the old and new values, the batch and the safe fix; the
    restart with the previous setting finishes the batch exactly once, and the change is then taken."""
    basin = make_basin(lite.endpoint, ["events", "dead", "dead-2"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=2)
    _half_written(cfg, on_error="dlq", dlq_stream="dead")
    kw: dict[str, Any] = {"on_error": "dlq", "dlq_stream": "dead", **change}
    encoder = kw.pop("encoder", None)
    changed = S2Writer(cfg, encoder, preflight=False, **kw)
    with pytest.raises(ConfigError) as refused:
        changed.mode.prepare(0, facts("run-2"))
    message = str(refused.value)
    assert setting in message
    assert "micro-batch 0 in flight" in message
    assert "Restart once with" in message
    assert "then change it" in message
    again = S2Writer(cfg, None, on_error="dlq", dlq_stream="dead", preflight=False)
    assert write_batch(again, 0, [GOOD, [BAD]], facts("run-3")) == "recovered"
    assert bodies(lite, basin, "events") == Counter(r.body for r in GOOD)
    assert bodies(lite, basin, "dead") == Counter([BAD.body])
    assert changed.mode.prepare(1, facts("run-4")) is not None  # nothing in flight: any change goes on


def test_a_batch_in_flight_goes_on_when_dead_letters_are_dropped(lite: LiteServer) -> None:
    """Dropping the dead-letter stream (``on_error="skip"``) cannot change what the written rows became:
    the batch in flight is recovered, each good row once, and the dead letter written before stays alone."""
    basin = make_basin(lite.endpoint, ["events", "dead"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=2)
    first = S2Writer(cfg, None, on_error="dlq", dlq_stream="dead", preflight=False)
    job = first.mode.prepare(0, facts("run-1"))
    assert job is not None
    first._create_known_streams()
    write_tasks(first, job, 0, [[BAD, *GOOD[:4]]])  # one task wrote; the driver died
    skip = S2Writer(cfg, None, on_error="skip", preflight=False)
    assert write_batch(skip, 0, [GOOD, [BAD]], facts("run-2")) == "recovered"
    assert bodies(lite, basin, "events") == Counter(r.body for r in GOOD)
    assert bodies(lite, basin, "dead") == Counter([BAD.body])


def test_a_second_default_writer_in_a_micro_batch_is_refused_before_it_writes(lite: LiteServer) -> None:
    """Two S2Writer objects without a writer_id in one foreachBatch (to two streams) share the query's
    identity: the second would find the first one's commit and skip its batch. It is refused before writing,
    with a ConfigError whose fix is a writer_id for each; the first writer's batch is committed."""
    basin = make_basin(lite.endpoint, ["a", "b"])
    cfg = cfg_for(lite.endpoint, basin)
    to_a, to_b = (S2Writer(cfg.replace(stream=s), None, preflight=False) for s in ("a", "b"))
    assert write_batch(to_a, 0, [GOOD], facts()) == "written"
    with pytest.raises(ConfigError) as refused:
        write_batch(to_b, 0, [GOOD[:3]], facts())
    message = str(refused.value)
    assert "two S2Writer objects write micro-batch 0" in message
    assert "default exactly-once identity, its query id 'q1'" in message
    assert "writer_id of its own" in message
    assert bodies(lite, basin, "b") == Counter()


@pytest.mark.parametrize("order", ["a first", "b first"])
def test_naming_both_writers_after_the_refusal_writes_each_row_once(lite: LiteServer, order: str) -> None:
    """The refusal's fix, then a restart: both writers get a writer_id. Spark replays batch 0, which the
    query id's ledger committed for stream a. The writer to stream a takes that ledger over (the routing it
    recorded is its own) and skips batch 0; the writer to stream b starts anew and writes it. Called in the
    other order, the writer to b meets a ledger of its query with another routing that committed batch 0 —
    another writer, or itself renamed with a new route: refused, naming both fixes, and nothing is
    decided by call order alone. Each row once, in both streams, either way."""
    basin = make_basin(lite.endpoint, ["a", "b"])
    cfg = cfg_for(lite.endpoint, basin)
    assert (
        write_batch(S2Writer(cfg.replace(stream="a"), None, preflight=False), 0, [GOOD], facts()) == "written"
    )
    with pytest.raises(ConfigError):
        write_batch(S2Writer(cfg.replace(stream="b"), None, preflight=False), 0, [GOOD[:3]], facts())
    to_a = S2Writer(cfg.replace(stream="a"), None, writer_id="orders-a", preflight=False)
    to_b = S2Writer(cfg.replace(stream="b"), None, writer_id="orders-b", preflight=False)
    if order == "b first":
        with pytest.raises(WriterConflictError) as refused:
            write_batch(to_b, 0, [GOOD[:3]], facts("run-2"))
        message = str(refused.value)
        assert "'q1' (stream=a; committed up to 0)" in message
        assert "call that writer before this one" in message
        assert "restart once with its previous writer_id and routing" in message
        assert bodies(lite, basin, "b") == Counter()
    assert write_batch(to_a, 0, [GOOD], facts("run-3")) == "skipped"
    assert write_batch(to_b, 0, [GOOD[:3]], facts("run-3")) == "written"
    assert ledger_state(cfg, "q1").moved_to == "orders-a"
    assert bodies(lite, basin, "a") == Counter(r.body for r in GOOD)
    assert bodies(lite, basin, "b") == Counter(r.body for r in GOOD[:3])
    for b, writer in ((1, to_a), (1, to_b)):
        assert write_batch(writer, b, [GOOD[3:5]], facts("run-3")) == "written"


def test_a_renamed_writer_with_new_dead_letters_takes_over_and_recovers(lite: LiteServer) -> None:
    """The default identity (the query id) left batch 0 half written; the restart names the writer and adds
    dead letters in one go. Its routing is the one the ledger recorded, so it takes that ledger over and
    recovers batch 0 under the old tag hash: each good row once, one dead letter; the old identity, used
    again, is refused naming the new one."""
    basin = make_basin(lite.endpoint, ["events", "dead"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=2)
    _half_written(cfg)
    renamed = S2Writer(cfg, None, writer_id="orders", on_error="dlq", dlq_stream="dead", preflight=False)
    job = renamed.mode.prepare(0, facts("run-2"))
    assert job is not None
    assert Token.parse(job.plan.fencing_token or "").writer == writer_hash("q1")  # the old hash, read back
    renamed2 = S2Writer(cfg, None, writer_id="orders", on_error="dlq", dlq_stream="dead", preflight=False)
    assert write_batch(renamed2, 0, [GOOD, [BAD]], facts("run-3")) == "recovered"
    assert bodies(lite, basin, "events") == Counter(r.body for r in GOOD)
    assert bodies(lite, basin, "dead") == Counter([BAD.body])
    with pytest.raises(WriterConflictError, match="taken over by writer_id 'orders'"):
        S2Writer(cfg, None, preflight=False).mode.prepare(1, facts("run-4"))


def test_one_writer_called_twice_without_a_run_id_is_refused(lite: LiteServer) -> None:
    """Where Spark's run id cannot be read, a second call of one writer in a micro-batch cannot be told from
    a restart in the same process: it is refused (fail closed), never skipped; so is a second writer object
    under the same identity."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    writer = S2Writer(cfg, None, preflight=False)
    assert write_batch(writer, 0, [GOOD[:6]], facts(run_id=None)) == "written"
    with pytest.raises(ConfigError, match=r"called again for micro-batch 0.*run id cannot be read"):
        write_batch(writer, 0, [GOOD[6:]], facts(run_id=None))
    other = S2Writer(cfg, None, preflight=False)
    with pytest.raises(ConfigError, match="two S2Writer objects write micro-batch 0"):
        write_batch(other, 0, [GOOD[6:]], facts(run_id=None))
    assert bodies(lite, cfg.basin, "events") == Counter(r.body for r in GOOD[:6])


class _Race:
    """The first time claimant A reads the ledger of `old` again to take it over (after having found it
    unclaimed), `other` (claimant B's whole take-over) runs first: B's ``moved_to`` lands in between."""

    def __init__(self, old: str, other: Any) -> None:
        self.old, self.other = old, other
        self.raced = False

    def client_factory(self, cfg: S2Config) -> S2:
        return _RacedClient(make_client(cfg), self)  # type: ignore[return-value]


class _RacedClient:
    def __init__(self, client: S2, race: _Race) -> None:
        self._client, self._race = client, race

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def basin(self, name: str) -> _RacedBasin:
        return _RacedBasin(self._client.basin(name), self._race)


class _RacedBasin:
    def __init__(self, basin: S2Basin, race: _Race) -> None:
        self._basin, self._race = basin, race
        self.tails = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._basin, name)

    def stream(self, name: str) -> Any:
        inner = self._basin.stream(name)
        return _RacedStream(inner, self) if name == f"_s2sink/ledger/{self._race.old}" else inner


class _RacedStream:
    def __init__(self, stream: S2Stream, basin: _RacedBasin) -> None:
        self._stream, self._basin = stream, basin

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def check_tail(self) -> AppendAck:
        basin, race = self._basin, self._basin._race
        basin.tails += 1
        if basin.tails == 2 and not race.raced:  # A looked (1st), and now loads the ledger to take it over
            race.raced = True
            await asyncio.to_thread(race.other)
        return await self._stream.check_tail()


def test_two_claimants_of_one_ledger_never_both_take_it_over(lite: LiteServer) -> None:
    """Two drivers of the query start together under new writer ids ("v2-a", "v2-b") while the old one
    ("v1") has batch 1 in flight. Both find v1 unclaimed; B's take-over lands between A's look and A's
    take-over. A is refused with WriterConflictError naming both, before writing anything (before: A copied
    v1's state anyway, and two ledgers went on at one epoch with one fencing token)."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=2)
    v1 = S2Writer(cfg, None, writer_id="v1", preflight=False)
    assert write_batch(v1, 0, [GOOD[:4]], facts("run-1")) == "written"
    assert v1.mode.prepare(1, facts("run-1")) is not None  # batch 1 announced, then the driver dies
    claimant_b = S2Writer(cfg, None, writer_id="v2-b", preflight=False)
    b_planned: list[object] = []
    race = _Race("v1", lambda: b_planned.append(claimant_b.mode.prepare(1, facts("run-b"))))
    saved = get_pool()
    install_pool(SessionPool(client_factory=race.client_factory))
    try:
        claimant_a = S2Writer(cfg, None, writer_id="v2-a", preflight=False)
        with pytest.raises(WriterConflictError) as refused:
            claimant_a.mode.prepare(1, facts("run-a"))
    finally:
        _runtime.run(get_pool().close_all())
        install_pool(saved)
    assert race.raced
    assert b_planned
    assert b_planned[0] is not None
    message = str(refused.value)
    assert "'v2-a'" in message
    assert "'v2-b'" in message
    assert "'v1'" in message
    assert ledger_state(cfg, "v1").moved_to == "v2-b"
    assert ledger_state(cfg, "v2-a").kind == "none"


def test_without_a_query_id_a_batch_in_flight_under_another_id_is_refused(lite: LiteServer) -> None:
    """Where the query id cannot be read (Spark Connect), a new writer_id whose routing has a batch in
    flight under another writer_id cannot tell a rename from another query: it refuses, naming both ids and
    the fix, instead of taking the streams over and writing that batch a second time."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    first = S2Writer(cfg, None, writer_id="nb-orders", preflight=False)
    assert first.mode.prepare(0, SessionFacts(None, None, connect=True)) is not None  # announced; it fails
    renamed = S2Writer(cfg, None, writer_id="nb-orders-2", preflight=False)
    with pytest.raises(WriterConflictError, match=r"'nb-orders-2'.*'nb-orders'.*writer_id='nb-orders'"):
        renamed.mode.prepare(0, SessionFacts(None, None, connect=True))


def test_an_idle_writer_of_another_query_does_not_block_a_new_one(lite: LiteServer) -> None:
    """A finished writer of another query to the same stream (its last batch committed) is no predecessor:
    a new query's writer starts fresh."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    assert (
        write_batch(
            S2Writer(cfg, None, writer_id="job-2025", preflight=False),
            0,
            [GOOD[:2]],
            facts(query_id="q-old"),
        )
        == "written"
    )
    new = S2Writer(cfg, None, writer_id="job-2026", preflight=False)
    job = new.mode.prepare(0, facts(query_id="q-new"))
    assert job is not None
    assert not job.recovery_layout
    assert Token.parse(job.plan.fencing_token or "").writer == writer_hash("job-2026")
