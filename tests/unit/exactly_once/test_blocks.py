"""Exactly-once building blocks against the lite server through the real SDK: ledger, fencing, read-back,
coordinator. No Spark."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from s2_sdk import AppendInput, CommandRecord, FencingTokenMismatchError, Record

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.fencing import Token, fence_if_older, writer_hash
from s2_sink._exactly_once.ledger import Ledger, ledger_stream_name
from s2_sink._exactly_once.ledger_records import SNAPSHOT_EVERY
from s2_sink._exactly_once.readback import fingerprint, read_back
from s2_sink._exactly_once.tags import ChunkTag
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink.errors import CommitError, ConfigError, FencedError, WriterConflictError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin, read_all, run


def _stream(cfg, name):  # type: ignore[no-untyped-def]
    return get_pool().client(cfg).basin(cfg.basin).stream(name)


def test_ledger_open_commit_and_reload(lite: LiteServer) -> None:
    """A new ledger is empty; open/commit records carry the whole state, so a reload reads only the tail
    record and gets epoch, committed batch and stream ends back."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))

    async def go() -> None:
        basin = get_pool().client(cfg).basin(cfg.basin)
        led = Ledger(basin, "w1")
        st = await led.load()
        assert (st.kind, st.epoch, st.committed) == ("none", 0, -1)
        await led.append(led.opened("run-a", "q1"))
        await led.append(led.committed(0, {"events": 10}))
        await led.append(led.committed(1, {"events": 25, "other": 3}))
        again = Ledger(basin, "w1")
        st2 = await again.load()
        assert (st2.kind, st2.epoch, st2.committed, st2.query_id) == ("commit", 1, 1, "q1")
        assert st2.ends == {"events": 25, "other": 3}

    _runtime.run(go())
    assert len(run(read_all(lite.endpoint, cfg.basin, ledger_stream_name("w1")))) == 3


def test_ledger_stays_bounded_trims_behind_snapshots_and_reloads_the_same_state(
    lite: LiteServer,
) -> None:
    """Many commits over many routed streams (one batch moves 30k of them, split over several appends):
    commits carry deltas, every SNAPSHOT_EVERY-th a snapshot, and the ledger is trimmed behind it. A
    reload after every stage gives the same state, also when the last record is a trim or a user's fence
    (command records), and the records kept stay few."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))

    async def go() -> None:
        basin = get_pool().client(cfg).basin(cfg.basin)
        led = Ledger(basin, "w")
        await led.load()
        await led.append(led.opened("run-a", "q1"))
        await led.append(led.committed(0, {f"events/c-{i:05d}": i + 1 for i in range(30_000)}))
        for batch in range(1, 2 * SNAPSHOT_EVERY + 10):
            moved = {f"events/c-{(batch * 7 + k) % 30_000:05d}": 100_000 + batch for k in range(3)}
            await led.append(led.committed(batch, moved))
            if batch % 40 == 0 or batch == 2 * SNAPSHOT_EVERY - 1:
                again = await Ledger(basin, "w").load()
                assert again == led.state
        stream = basin.stream(ledger_stream_name("w"))
        await stream.append(AppendInput(records=[CommandRecord.fence("someone")]))
        again = Ledger(basin, "w")
        assert await again.load() == led.state
        await stream.append(AppendInput(records=[CommandRecord.fence("")]))
        await again.load()
        await again.append(again.committed(again.state.committed + 1, {"events/c-00000": 7_000_000}))
        assert (await Ledger(basin, "w").load()) == again.state

    _runtime.run(go())
    kept = run(read_all(lite.endpoint, cfg.basin, ledger_stream_name("w")))
    assert len(kept) < SNAPSHOT_EVERY + 30  # trimmed: the last snapshot's pieces and the deltas after it
    assert max(len(r.body) for r in kept) < 100_000


def test_ledger_of_the_previous_format_loads_and_continues(lite: LiteServer) -> None:
    """A ledger whose records are version 1 (every record the full state) loads, and new records on top
    of it reload to the same state."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))
    old = {
        "v": 1,
        "kind": "commit",
        "epoch": 4,
        "run": "r",
        "query_id": "q",
        "committed": 9,
        "ends": {"a": 5},
    }

    async def go() -> None:
        basin = get_pool().client(cfg).basin(cfg.basin)
        await basin.ensure_stream(ledger_stream_name("w"))
        stream = basin.stream(ledger_stream_name("w"))
        await stream.append(AppendInput(records=[Record(orjson.dumps({**old, "kind": "open"}))]))
        await stream.append(AppendInput(records=[Record(orjson.dumps(old))]))
        led = Ledger(basin, "w")
        st = await led.load()
        assert (st.kind, st.epoch, st.committed, st.query_id, st.ends) == ("commit", 4, 9, "q", {"a": 5})
        await led.append(led.opened("run-b", "q"))
        await led.append(led.committed(10, {"b": 2}))
        st2 = await Ledger(basin, "w").load()
        assert (st2.epoch, st2.committed, st2.ends) == (5, 10, {"a": 5, "b": 2})

    _runtime.run(go())


def test_ledger_with_no_state_left_refuses(lite: LiteServer) -> None:
    """A ledger trimmed past its last state record (only command records left) is not read as a new
    writer (epoch 1, below the streams' fences): it is a CommitError naming the way out."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))

    async def go() -> None:
        basin = get_pool().client(cfg).basin(cfg.basin)
        led = Ledger(basin, "w")
        await led.load()
        await led.append(led.opened("run-a", "q1"))
        stream = basin.stream(ledger_stream_name("w"))
        await stream.append(AppendInput(records=[CommandRecord.trim(1)]))
        refused: CommitError | None = None
        for _ in range(40):  # the trim is applied in the background
            try:
                await Ledger(basin, "w").load()
            except CommitError as exc:
                refused = exc
                break
            await asyncio.sleep(0.1)
        assert refused is not None, "the trimmed ledger still loaded a state"
        assert "new writer_id" in str(refused)

    _runtime.run(go())


def test_ledger_second_driver_gets_writer_conflict(lite: LiteServer) -> None:
    """Two drivers with the same writer identity: the one whose view of the ledger is stale fails with
    WriterConflictError on its next (conditional) append instead of interleaving records."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))

    async def go() -> None:
        basin = get_pool().client(cfg).basin(cfg.basin)
        a, b = Ledger(basin, "w"), Ledger(basin, "w")
        await a.load()
        await a.append(a.opened("run-a", None))
        await b.load()
        await b.append(b.opened("run-b", None))
        with pytest.raises(WriterConflictError, match="another driver"):
            await a.append(a.committed(0, {}))

    _runtime.run(go())


def test_fence_if_older_rules(lite: LiteServer) -> None:
    """Fencing: an empty token is taken over; an older run of ours is fenced over and its appends get 412;
    a retry bumps the generation; a newer run or a foreign token is a FencedError and is left in place."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["s"]))
    w = writer_hash("w")

    async def go() -> None:
        s = _stream(cfg, "s")
        assert await fence_if_older(s, Token(1, 0, w)) == Token(1, 0, w)
        assert (await s.check_tail()).seq_num == 1  # a fence record
        assert await fence_if_older(s, Token(2, 0, w)) == Token(2, 0, w)
        with pytest.raises(FencingTokenMismatchError):  # the old run is now a zombie
            await s.append(AppendInput(records=[Record(b"x")], fencing_token=str(Token(1, 0, w))))
        assert await fence_if_older(s, Token(2, 0, w), bump=True) == Token(2, 1, w)
        tail = (await s.check_tail()).seq_num
        # Same run: adopt the newer generation, no append.
        assert await fence_if_older(s, Token(2, 0, w)) == Token(2, 1, w)
        assert (await s.check_tail()).seq_num == tail
        with pytest.raises(FencedError, match="newer run"):
            await fence_if_older(s, Token(1, 0, w))
        other = Token(9, 0, writer_hash("other"))
        await fence_if_older(s, Token(3, 0, w))
        await s.append(AppendInput(records=[Record(b"")], fencing_token=str(Token(3, 0, w))))
        from s2_sdk import CommandRecord

        await s.append(AppendInput(records=[CommandRecord.fence(str(other))]))
        with pytest.raises(FencedError, match="not this writer"):
            await fence_if_older(s, Token(4, 0, w))

    _runtime.run(go())


def test_read_back_collects_only_matching_chunks(lite: LiteServer) -> None:
    """Read-back finds this writer's chunks by their tag and record count, ignores other writers' records
    (even interleaved between chunks) and returns the fingerprint multiset of the matching chunks only."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["s"]))
    w, other = writer_hash("w"), writer_hash("x")

    def chunk(tag: ChunkTag, bodies: list[bytes]) -> AppendInput:
        recs = [Record(b, [(b"h", b"v")]) for b in bodies]
        recs[0] = Record(recs[0].body, [tag.encode(), *recs[0].headers])
        return AppendInput(records=recs)

    async def go() -> None:
        s = _stream(cfg, "s")
        await s.append(AppendInput(records=[Record(b"before")]))
        start = (await s.check_tail()).seq_num
        await s.append(chunk(ChunkTag(w, 1, 7, 0, 0, 0, 3), [b"a", b"b", b"a"]))
        await s.append(AppendInput(records=[Record(b"plain-1"), Record(b"plain-2")]))
        await s.append(chunk(ChunkTag(w, 1, 7, 1, 0, 0, 2), [b"c", b"d"]))
        await s.append(chunk(ChunkTag(other, 1, 7, 0, 0, 0, 2), [b"e", b"f"]))
        await s.append(chunk(ChunkTag(w, 1, 8, 0, 0, 0, 1), [b"g"]))
        got = await read_back(s, writer=w, start=start, match=lambda t: t.batch == 7 and t.partition == 0)
        fp = lambda b: fingerprint("s", [(b"h", b"v")], b)  # noqa: E731
        assert dict(got.fingerprints) == {fp(b"a"): 2, fp(b"b"): 1}
        all7 = await read_back(s, writer=w, start=start, match=lambda t: t.batch == 7)
        assert sum(all7.fingerprints.values()) == 5
        assert len(all7.chunks) == 2

    _runtime.run(go())


def test_coordinator_skips_committed_and_detects_backwards_batch_ids(lite: LiteServer) -> None:
    """The coordinator plans new batches, returns None for a batch the ledger already committed (a replay
    after Spark lost its commit), flags the first batch of a restarted run as recovery when the old run had
    announced it (an ``intent`` after the last commit), and refuses batch ids that went backwards (a
    deleted checkpoint) with a WriterConflictError asking for a new writer_id."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    c1 = Coordinator(cfg, "wid", query_id="q1", static_streams=["events"])
    p0 = c1.begin_batch(0)
    assert p0 is not None
    assert not p0.recovery
    assert Token.parse(p0.token) == Token(epoch=1, gen=0, writer=writer_hash("wid"))
    c1.commit_batch(0, {"events": 5})
    p1 = c1.begin_batch(1)
    assert p1 is not None
    c1.commit_batch(1, {"events": 9})
    assert c1.begin_batch(2) is not None  # the run announces batch 2, then its driver dies

    c2 = Coordinator(cfg, "wid", query_id="q1", static_streams=["events"])  # driver restart
    assert c2.begin_batch(1) is None  # ledger has it: write nothing
    p2 = c2.begin_batch(2)
    assert p2 is not None
    assert p2.recovery  # the old run announced batch 2: it may have written part of it
    assert Token.parse(p2.token) == Token(epoch=2, gen=0, writer=writer_hash("wid"))
    assert p2.starts.inline == {"events": 9}

    c3 = Coordinator(cfg, "wid", query_id="q-new", static_streams=["events"])  # checkpoint deleted
    with pytest.raises(WriterConflictError, match="new writer_id"):
        c3.begin_batch(0)
    c4 = Coordinator(cfg, "wid", query_id="q-other", static_streams=["events"])  # another query, any batch
    with pytest.raises(WriterConflictError, match=r"'q1'.*'q-other'"):
        c4.begin_batch(7)
    c5 = Coordinator(cfg, "wid", query_id=None, static_streams=["events"])  # no query id: batch ids decide
    with pytest.raises(WriterConflictError, match="went backwards"):
        c5.begin_batch(0)


def test_coordinator_sees_a_new_start_of_the_query_in_the_same_process(lite: LiteServer) -> None:
    """The same coordinator (the same S2Writer object) after the query is started again in the same
    process: a new Spark run id, or without one a batch that began and was never committed, reloads the
    ledger and opens a new epoch (in recovery mode when a batch was announced); an ordinary next batch of
    the same start stays in the epoch; a batch the same start committed, seen again with the same run id or
    without one, is refused as a second call (without a run id a restart in this process cannot be told
    from it: fail closed, never a silent skip)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    c = Coordinator(cfg, "wid", query_id="q1", static_streams=["events"])
    p0 = c.begin_batch(0, "run-a")
    assert p0 is not None
    assert (Token.parse(p0.token).epoch, p0.recovery) == (1, False)
    # batch 0 fails after some tasks wrote: no commit; the query is started again (run-b)
    again = c.begin_batch(0, "run-b")
    assert again is not None
    assert (Token.parse(again.token).epoch, again.recovery) == (2, True)
    c.commit_batch(0, {"events": 4})
    p1 = c.begin_batch(1, "run-b")
    assert p1 is not None
    assert (Token.parse(p1.token).epoch, p1.recovery) == (2, False)
    # no run id readable (Spark Connect): an uncommitted batch begun again is a new start
    q1 = c.begin_batch(1, None)
    assert q1 is not None
    assert (Token.parse(q1.token).epoch, q1.recovery) == (3, True)
    c.commit_batch(1, {"events": 8})
    # ... but a committed batch id seen again is refused: it may be a second call in the micro-batch
    with pytest.raises(ConfigError, match=r"called again for micro-batch 1.*run id cannot be read"):
        c.begin_batch(1, None)
    p2 = c.begin_batch(2, None)
    assert p2 is not None
    assert (Token.parse(p2.token).epoch, p2.recovery) == (3, False)
    assert p2.starts.inline == {"events": 8}
    c.commit_batch(2, {"events": 9})
    with pytest.raises(ConfigError, match="called again for micro-batch 2"):
        c.begin_batch(2, None)
    # with a run id, the same: a new start sees the committed batch (skipped), the same start is refused
    assert c.begin_batch(2, "run-c") is None
    with pytest.raises(ConfigError, match="called again for micro-batch 2"):
        c.begin_batch(2, "run-c")
    p3 = c.begin_batch(3, "run-c")
    assert p3 is not None
    # a new epoch, but no recovery: the ledger ends in batch 2's commit, nothing announced batch 3
    assert (Token.parse(p3.token).epoch, p3.recovery) == (4, False)
    c.commit_batch(3, {"events": 10})
    with pytest.raises(ConfigError, match="called again for micro-batch 3"):
        c.begin_batch(3, "run-c")


def test_second_exactly_once_writer_displaces_the_first_with_a_clear_error(lite: LiteServer) -> None:
    """A second exactly-once writer (another writer_id, e.g. the pipeline restarted on a new checkpoint)
    on a stream the first one writes: it takes the stream over; the first writer's next append is refused
    and its token keeper raises FencedError instead of fencing back, and a restart of the first writer
    fails the same way. Nothing is silently interleaved or fought over."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    first = Coordinator(cfg, "first", static_streams=["events"])
    plan_a = first.begin_batch(0)
    assert plan_a is not None

    async def append_a() -> None:
        await _stream(cfg, "events").append(AppendInput(records=[Record(b"a")], fencing_token=plan_a.token))

    _runtime.run(append_a())
    first.commit_batch(0, {"events": 2})
    plan_a1 = first.begin_batch(1)
    assert plan_a1 is not None

    second = Coordinator(cfg, "second", static_streams=["events"])
    assert second.begin_batch(0) is not None  # takes the stream over

    with pytest.raises(FencingTokenMismatchError) as refused:
        _runtime.run(append_a())
    with pytest.raises(FencedError, match="not this writer"):
        _runtime.run(plan_a1.keeper("events", refused.value.expected_fencing_token))
    with pytest.raises(FencedError, match="not this writer"):
        Coordinator(cfg, "first", static_streams=["events"]).begin_batch(1)


def test_ledger_append_survives_503s_and_an_ambiguous_drop(lite: LiteServer) -> None:
    """Ledger appends retry through 503s and through a connection dropped after the append was applied but
    before its ack: the conditional append never lands twice and the state reads back right."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))

    async def go() -> None:
        basin = get_pool().client(cfg).basin(cfg.basin)
        led = Ledger(basin, "w")
        await led.load()
        lite.faults.fail_next_appends(4, status=503)
        await led.append(led.opened("run", None))
        lite.faults.drop_connections(after_appends=0, ambiguous=True)
        await led.append(led.committed(0, {"events": 3}))
        lite.faults.clear()
        await led.append(led.committed(1, {"events": 7}))
        st = await Ledger(basin, "w").load()
        assert (st.kind, st.committed, st.ends) == ("commit", 1, {"events": 7})

    _runtime.run(go())
    assert len(run(read_all(lite.endpoint, cfg.basin, ledger_stream_name("w")))) == 3


def test_a_restart_after_a_clean_commit_is_not_a_recovery(lite: LiteServer) -> None:
    """A run that committed its last batch and stopped (a scheduled availableNow job) leaves nothing in
    flight: the next start's first batch is a normal batch in a new epoch, not a recovery; a run that died
    after announcing a batch (its ``intent``) makes that batch a recovery."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    first = Coordinator(cfg, "wid", query_id="q1", static_streams=["events"])
    assert first.begin_batch(0) is not None
    first.commit_batch(0, {"events": 3})  # the job ends here

    second = Coordinator(cfg, "wid", query_id="q1", static_streams=["events"])  # the next scheduled run
    plan = second.begin_batch(1)
    assert plan is not None
    assert not plan.recovery
    assert Token.parse(plan.token).epoch == 2  # still a new epoch: the old run's zombies are fenced out
    # it dies after announcing batch 1 (tasks may have written): the next start recovers batch 1
    third = Coordinator(cfg, "wid", query_id="q1", static_streams=["events"])
    replay = third.begin_batch(1)
    assert replay is not None
    assert replay.recovery


def test_ledger_trimmed_behind_its_last_state_records_base_is_refused(lite: LiteServer) -> None:
    """A trim appended by hand past the snapshot the last state record folds its stream ends from leaves
    that record but not all of its ends: loading is a CommitError, never a state with part of the ends (a
    later batch's read-back would start at a missing stream's position 0)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))

    async def go() -> None:
        basin = get_pool().client(cfg).basin(cfg.basin)
        led = Ledger(basin, "w", cfg=cfg)
        await led.load()
        await led.append(led.opened("run", "q"))
        await led.append(led.committed(0, {"a": 5}))
        await led.append(led.committed(1, {"b": 7}))
        assert led.tail is not None
        await basin.stream(ledger_stream_name("w")).append(
            AppendInput(records=[CommandRecord.trim(led.tail - 1)], match_seq_num=led.tail)
        )
        with pytest.raises(CommitError, match="no state record"):
            await Ledger(basin, "w", cfg=cfg).load()

    _runtime.run(go())
