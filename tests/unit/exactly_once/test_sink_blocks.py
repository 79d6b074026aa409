"""Exactly-once for the format("s2") sink, block by block against the lite server (no Spark): an epoch that
goes on across the clean micro-batches one driver process planned and a new one after anything else, the
ledger commit, and the partition-scoped replay that refuses a replay partitioned differently from the
execution it repairs."""

from __future__ import annotations

import pickle
from collections import Counter

import orjson
import pyarrow as pa
import pytest

from s2_sink._exactly_once import sink_run as _sink_run
from s2_sink._exactly_once.ends_cache import lookup
from s2_sink._exactly_once.fencing import Token, writer_hash
from s2_sink._exactly_once.ledger import Ledger, ledger_stream_name
from s2_sink._exactly_once.sink_run import SinkRun, commit_sink_run, open_sink_run
from s2_sink._exactly_once.tags import find_tag
from s2_sink._exactly_once.takeover import mark_moved
from s2_sink._transport import runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.errors import (
    CommitError,
    FencedError,
    ReplayMismatchError,
    StreamResetError,
    WriterConflictError,
)
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin, read_all, run


@pytest.fixture(autouse=True)
def _fresh_process() -> None:
    """Each test starts as a driver process that planned nothing yet."""
    new_process()


def new_process() -> None:
    """Model a new driver process (a restart, or a planning step in another Python worker): it knows no
    execution it planned before, which is all the sink keeps in process memory."""
    _sink_run._planned.clear()


def _plan(run_: SinkRun, cfg: S2Config, batch: int, query_id: str | None = "q") -> WritePlan:
    epoch = run_.plan_batch(batch, query_id)
    assert epoch is not None
    spec = WriteSpec.build(cfg, Routing.build(stream="events", stream_column=None, shards=None))
    return spec.plan(batch, epoch)


def _write(plan: WritePlan, partition: int, bodies: list[bytes], attempt: int = 0) -> None:
    frame = pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})
    write_partition(plan, [frame], PartitionContext(plan.batch_id, partition, attempt, 0, 0))


def _bodies(endpoint: str, basin: str) -> Counter[bytes]:
    return Counter(bytes(r.body) for r in run(read_all(endpoint, basin, "events")))


def test_one_epoch_per_execution_skip_committed_and_conflicts(lite: LiteServer) -> None:
    """Each execution planned by a new driver process opens the next epoch; after a committed execution
    the next one is not a recovery, after an uncommitted one it is; a batch the ledger has is planned as
    "write nothing"; a commit by an execution that is no longer the ledger's last one, batch ids going
    backwards, and a task of another query all fail with clear errors."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    r1 = open_sink_run(cfg, "w", "q", ["events"])
    assert (r1.epoch, r1.recovery) == (1, False)
    plan = _plan(r1, cfg, 0)
    assert plan.fencing_token is not None
    assert plan.fencing_token.endswith(":1.0~")
    _write(plan, 0, [b"a", b"b"])
    commit_sink_run(cfg, "w", r1, 0, {"events": 3})

    new_process()
    r2 = open_sink_run(cfg, "w", "q", ["events"])
    assert (r2.epoch, r2.recovery, r2.before.committed) == (2, False, 0)
    assert r2.plan_batch(0, "q") is None  # the ledger has it
    _plan(r2, cfg, 1)  # planned, then the driver dies before the commit

    new_process()
    r3 = open_sink_run(cfg, "w", "q", ["events"])
    assert (r3.epoch, r3.recovery) == (3, True)
    with pytest.raises(WriterConflictError, match="another driver"):
        commit_sink_run(cfg, "w", r2, 1, {})
    with pytest.raises(WriterConflictError, match="went backwards"):
        r3.plan_batch(-1, "q")
    with pytest.raises(CommitError, match=r"s2\.writer-id"):
        r3.plan_batch(1, "another-query")
    commit_sink_run(cfg, "w", r3, 1, {})
    new_process()
    assert open_sink_run(cfg, "w", "q", ["events"]).recovery is False
    commit_sink_run(cfg, "w", None, 2, {})  # no task reported: committed on top of the open it finds
    new_process()
    assert open_sink_run(cfg, "w", "q", ["events"]).before.committed == 2


def test_reset_checkpoint_under_an_explicit_writer_id_is_a_conflict_not_a_skip(lite: LiteServer) -> None:
    """An explicit s2.writer-id whose driver cannot read the query id: the commit records the query id
    the tasks saw, so after a checkpoint reset (a new query id, batch 0 again) batch 0 is refused with a
    WriterConflictError naming both queries, never skipped as already committed."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin)
    r1 = open_sink_run(cfg, "orders", None, ["events"])
    _write(_plan(r1, cfg, 0, "q-old"), 0, [b"a"])
    commit_sink_run(cfg, "orders", r1, 0, {}, query_id="q-old")
    r2 = open_sink_run(cfg, "orders", None, ["events"])
    assert r2.before.query_id == "q-old"
    with pytest.raises(WriterConflictError, match=r"q-old.*q-new.*new writer_id") as info:
        r2.plan_batch(0, "q-new")
    assert "s2.writer-id" in str(info.value)
    assert r2.plan_batch(0, "q-old") is None  # the old query's replay of batch 0 is still a skip
    # a driver that reads the new query id from the checkpoint refuses before opening an epoch
    with pytest.raises(WriterConflictError, match="q-old"):
        open_sink_run(cfg, "orders", "q-new", ["events"])
    # the open record keeps the ledger's query: the next execution's tasks refuse the new query again
    r4 = open_sink_run(cfg, "orders", None, ["events"])
    assert r4.before.query_id == "q-old"
    with pytest.raises(WriterConflictError, match="q-new"):
        r4.plan_batch(0, "q-new")
    assert _bodies(lite.endpoint, basin) == Counter([b"a"])


def test_a_writer_id_another_identity_took_over_is_refused(lite: LiteServer) -> None:
    """A ledger an `S2Writer` took over under another writer_id (marked ``moved_to`` it) is written no more
    by format("s2") either: its planning refuses with the take-over's WriterConflictError naming the
    successor, before any open record, since readers follow the ledger to its successor."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    commit_sink_run(cfg, "w", open_sink_run(cfg, "w", "q", ["events"]), 0, {})
    basin = get_pool().client(cfg).basin(cfg.basin)
    runtime.run(mark_moved(Ledger(basin, "w", cfg=cfg), "w-new"))
    new_process()
    with pytest.raises(WriterConflictError, match="taken over by writer_id 'w-new'"):
        open_sink_run(cfg, "w", "q", ["events"])
    state = runtime.run(Ledger(basin, "w", cfg=cfg).load())
    assert (state.kind, state.moved_to) == ("commit", "w-new")  # no open record on top


def test_a_writer_id_taken_over_is_refused_by_the_process_that_planned_it_last(lite: LiteServer) -> None:
    """The take-over's refusal holds in the driver process that planned the ledger's last commit too: the
    take-over's ``moved_to`` record keeps that commit's run and epoch, so it must not be taken for "nothing
    appended since" and the epoch continued under the old identity."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    commit_sink_run(cfg, "w", open_sink_run(cfg, "w", "q", ["events"]), 0, {})
    basin = get_pool().client(cfg).basin(cfg.basin)
    runtime.run(mark_moved(Ledger(basin, "w", cfg=cfg), "w-new"))
    with pytest.raises(WriterConflictError, match="taken over by writer_id 'w-new'"):
        open_sink_run(cfg, "w", "q", ["events"])
    state = runtime.run(Ledger(basin, "w", cfg=cfg).load())
    assert (state.kind, state.moved_to) == ("commit", "w-new")  # no intent record on top


def test_a_restart_in_the_same_process_opens_its_epoch_under_its_own_options(lite: LiteServer) -> None:
    """A query restarted in the same driver process (its Python worker reused) with ``s2.create-streams``
    now on, after an execution that never committed: the new epoch is opened with the restart's options,
    so its static stream is created and fenced by the driver, not by the options of the execution planned
    before the restart."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin)
    commit_sink_run(cfg, "w", open_sink_run(cfg, "w", "q", ["events"]), 0, {})
    open_sink_run(cfg, "w", "q", ["events"])  # batch 1 planned, never committed: the query stops
    restarted = cfg_for(lite.endpoint, basin, stream="new", create_streams=True)
    run_ = open_sink_run(restarted, "w", "q", ["new"])
    fences = run(read_all(lite.endpoint, basin, "new", commands=True))
    assert [bytes(r.body).decode() for r in fences][-1:] == [str(Token(run_.epoch, 0, writer_hash("w")))]


def test_task_refuses_an_epoch_opened_for_an_earlier_batch(lite: LiteServer) -> None:
    """Each execution's epoch is opened for the batch after the ledger's last commit: a task of a later
    batch under it (a writer shipped without being pickled again) fails with CommitError before writing."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin)
    r1 = open_sink_run(cfg, "w", "q", ["events"])
    _write(_plan(r1, cfg, 0), 0, [b"a"])
    commit_sink_run(cfg, "w", r1, 0, {})
    r2 = open_sink_run(cfg, "w", "q", ["events"])
    assert r2.plan_batch(1, "q") is not None
    with pytest.raises(CommitError, match="opened for batch 1"):
        r2.plan_batch(2, "q")
    assert _bodies(lite.endpoint, basin) == Counter([b"a"])


@pytest.mark.parametrize(
    ("p1", "trust"),
    [
        ([b"c", b"d", b"e", b"f"], False),  # duplicates within a partition: checked, nothing ambiguous
        ([b"c", b"d", b"e", b"b"], True),  # "b" also in partition 0: written because the user vouches
    ],
)
def test_replay_with_the_same_partitioning_writes_each_missing_record_once(
    lite: LiteServer, p1: list[bytes], trust: bool
) -> None:
    """An execution dies after partition 0 wrote everything and partition 1 wrote part (a chunk of 2 of its
    4 records); the replay, partitioned the same, subtracts per partition and completes the batch: every
    record exactly once, identical input records included."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=2)
    p0 = [b"a", b"b", b"b"]
    dead = open_sink_run(cfg, "w", None, ["events"])
    _write(_plan(dead, cfg, 0, None), 0, p0)
    _write(_plan(dead, cfg, 0, None), 1, p1[:2])

    replay = open_sink_run(cfg, "w", None, ["events"], trust_partitioning=trust)
    assert replay.recovery
    for partition, bodies in enumerate((p0, p1)):
        _write(_plan(replay, cfg, 0, None), partition, bodies)
    commit_sink_run(cfg, "w", replay, 0, {})
    assert _bodies(lite.endpoint, basin) == Counter(p0 + p1)
    records = run(read_all(lite.endpoint, basin, "events"))
    epochs = {tag.epoch for r in records if (tag := find_tag(r.headers))}
    assert epochs == {1, 2}  # the batch really was split between the dead execution and the replay


def test_replay_with_another_partitioning_refuses_before_writing_a_duplicate(lite: LiteServer) -> None:
    """The replay moves a record the dead execution wrote from partition 0 to partition 1: partition 1
    cannot tell whether its copy is new, refuses with ReplayMismatchError naming the way out, and nothing
    is duplicated."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin)
    dead = open_sink_run(cfg, "w", None, ["events"])
    _write(_plan(dead, cfg, 0, None), 0, [b"a", b"b"])

    replay = open_sink_run(cfg, "w", None, ["events"])
    _write(_plan(replay, cfg, 0, None), 0, [b"a"])  # its own earlier copy: subtracted
    with pytest.raises(ReplayMismatchError, match=r"s2\.replay-partitioning=same"):
        _write(_plan(replay, cfg, 0, None), 1, [b"c", b"b"])
    assert max(_bodies(lite.endpoint, basin).values()) == 1


# -- one epoch per run of clean micro-batches -----------------------------------------------------------

ROUTED = ("r-a", "r-b")


def _routed_batch(cfg: S2Config, writer_id: str, batch: int, *, partition: int = 0, task_id: int = 0) -> None:
    """Plan one execution of `batch` (routed to both ROUTED streams), write it in one task and commit it."""
    r = open_sink_run(cfg, writer_id, "q", [])
    _commit(cfg, r, batch, _write_routed(r, cfg, batch, partition=partition, task_id=task_id))


def _write_routed(
    r: SinkRun, cfg: S2Config, batch: int, *, partition: int = 0, task_id: int = 0, bodies: int = 3
) -> dict[str, int]:
    epoch = r.plan_batch(batch, "q")
    assert epoch is not None
    plan = WriteSpec.build(cfg, Routing.build(stream=None, stream_column="dest", shards=None)).plan(
        batch, epoch
    )
    targets = [ROUTED[i % 2] for i in range(bodies)]
    frame = pa.record_batch(
        {
            "_s2_body": pa.array([b"%d-%d-%d" % (batch, partition, i) for i in range(bodies)], pa.binary()),
            STREAM_COLUMN: pa.array(targets, pa.string()),
        }
    )
    result = write_partition(plan, [frame], PartitionContext(batch, partition, 0, task_id, 0))
    return aggregate(batch, result.to_pylist(), 0.0, delivery="exactly-once").end_positions()


def _commit(cfg: S2Config, r: SinkRun, batch: int, ends: dict[str, int]) -> None:
    commit_sink_run(cfg, r.writer_id, r, batch, ends, query_id="q")


def _fences(endpoint: str, basin: str, stream: str) -> int:
    records = run(read_all(endpoint, basin, stream, commands=True))
    return sum(1 for r in records if r.headers == [(b"", b"fence")])


def _ledger(endpoint: str, basin: str, writer_id: str) -> list[tuple[str, int]]:
    docs = [orjson.loads(r.body) for r in run(read_all(endpoint, basin, ledger_stream_name(writer_id)))]
    return [(d["kind"], d["epoch"]) for d in docs if d["kind"] != "ends"]


@pytest.mark.parametrize("planner", ["one process", "a new process every batch"])
def test_epoch_goes_on_across_clean_batches_without_fencing_routed_streams(
    lite: LiteServer, planner: str
) -> None:
    """Three clean micro-batches planned by one driver process share one epoch: after the first, no batch
    opens an epoch and no routed stream gets a fence record (so no 412 and no re-send); the ledger has an
    ``intent`` instead of an ``open`` per batch. Planned by a new process each time (a restart, or
    another Python worker), every batch opens an epoch and fences every routed stream it writes again."""
    basin = make_basin(lite.endpoint, list(ROUTED))
    cfg = cfg_for(lite.endpoint, basin, stream=None)
    fences = []
    for batch in range(3):
        if planner != "one process":
            new_process()
        _routed_batch(cfg, "w", batch)
        fences.append([_fences(lite.endpoint, basin, s) for s in ROUTED])
    if planner == "one process":
        assert fences == [[1, 1], [1, 1], [1, 1]]
        kinds = [("open", 1), ("commit", 1), ("intent", 1), ("commit", 1), ("intent", 1), ("commit", 1)]
    else:
        assert fences == [[1, 1], [2, 2], [3, 3]]
        kinds = [("open", 1), ("commit", 1), ("open", 2), ("commit", 2), ("open", 3), ("commit", 3)]
    assert _ledger(lite.endpoint, basin, "w") == kinds
    got = Counter(bytes(r.body) for s in ROUTED for r in run(read_all(lite.endpoint, basin, s)))
    assert got == Counter(b"%d-0-%d" % (b, i) for b in range(3) for i in range(3))


def test_an_epoch_goes_on_when_each_execution_builds_its_config_from_one_set_of_options(
    lite: LiteServer,
) -> None:
    """``format("s2")`` builds a new `S2Config` from the query's options for every micro-batch execution: the
    process that planned the last commit compares it with the one it planned under, so configs built from
    the same options must compare equal, or every execution would open an epoch (an ``open`` record and a
    fence per stream and micro-batch)."""
    basin = make_basin(lite.endpoint, list(ROUTED))
    options = {
        "s2.basin": basin,
        "s2.auth-token": "test-token",
        "s2.endpoints.account": lite.endpoint,
        "s2.endpoints.basin": lite.endpoint,
        "s2.delivery-timeout-ms": "30s",
        "sink.requests.max-inflight-bytes": "32MiB",
    }
    for batch in range(3):
        _routed_batch(S2Config.from_options(dict(options)), "w", batch)
    kinds = [("open", 1), ("commit", 1), ("intent", 1), ("commit", 1), ("intent", 1), ("commit", 1)]
    assert _ledger(lite.endpoint, basin, "w") == kinds


def test_failed_execution_of_a_continued_epoch_opens_a_new_epoch_and_recovers(lite: LiteServer) -> None:
    """The process continued its epoch for batch 1 (an ``intent``), a task wrote part of it and the
    execution failed (no commit). The next planning, in the same process, finds the ledger ending in
    that intent, not in its commit: a new epoch, a recovery, and the replay writes each record once."""
    basin = make_basin(lite.endpoint, list(ROUTED))
    cfg = cfg_for(lite.endpoint, basin, stream=None)
    _routed_batch(cfg, "w", 0)
    failed = open_sink_run(cfg, "w", "q", [])
    assert (failed.epoch, failed.recovery, failed.opened and failed.opened.kind) == (1, False, "intent")
    _write_routed(failed, cfg, 1, bodies=1)  # part of batch 1, then the execution fails

    replay = open_sink_run(cfg, "w", "q", [])
    assert (replay.epoch, replay.recovery) == (2, True)
    _commit(cfg, replay, 1, _write_routed(replay, cfg, 1))
    assert _ledger(lite.endpoint, basin, "w") == [
        ("open", 1),
        ("commit", 1),
        ("intent", 1),
        ("open", 2),
        ("commit", 2),
    ]
    got = Counter(bytes(r.body) for s in ROUTED for r in run(read_all(lite.endpoint, basin, s)))
    assert got == Counter(b"%d-0-%d" % (b, i) for b in range(2) for i in range(3))


def test_restart_after_a_continued_epoch_commit_is_not_a_recovery(lite: LiteServer) -> None:
    """A new driver process after a continued epoch's commit opens a new epoch (fencing the static
    stream again) without a recovery: the ledger ends in a commit, nothing was announced after it. A new
    process after a continued epoch's intent (a crash once the batch was announced) recovers."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin)
    for batch in range(2):
        r = open_sink_run(cfg, "w", "q", ["events"])
        _write(_plan(r, cfg, batch), 0, [b"%d" % batch])
        commit_sink_run(cfg, "w", r, batch, {})
    assert (r.epoch, _fences(lite.endpoint, basin, "events")) == (1, 1)

    new_process()
    restarted = open_sink_run(cfg, "w", "q", ["events"])
    assert (restarted.epoch, restarted.recovery) == (2, False)
    assert _fences(lite.endpoint, basin, "events") == 2
    commit_sink_run(cfg, "w", restarted, 2, {})
    assert open_sink_run(cfg, "w", "q", ["events"]).opened.kind == "intent"  # type: ignore[union-attr]
    new_process()  # ... and the driver dies after announcing batch 3
    assert (open_sink_run(cfg, "w", "q", ["events"]).epoch, True) == (3, True)
    new_process()
    assert open_sink_run(cfg, "w", "q", ["events"]).recovery


def test_another_drivers_commit_since_opens_a_new_epoch(lite: LiteServer) -> None:
    """Process A committed batch 0; another driver (process B) committed batch 1 after it. A's next
    planning finds a last commit that is not its own: it opens a new epoch rather than continue its old
    one, whose tokens the streams no longer carry."""
    basin = make_basin(lite.endpoint, list(ROUTED))
    cfg = cfg_for(lite.endpoint, basin, stream=None)
    _routed_batch(cfg, "w", 0)
    process_a = dict(_sink_run._planned)
    new_process()
    _routed_batch(cfg, "w", 1)
    _sink_run._planned.clear()
    _sink_run._planned.update(process_a)
    r = open_sink_run(cfg, "w", "q", [])
    assert (r.epoch, r.recovery, r.opened and r.opened.kind) == (3, False, "open")


def test_zombie_of_an_earlier_batch_cannot_write_into_the_continued_epoch(lite: LiteServer) -> None:
    """Batch 0's partition 0 was retried (task 20 after task 10, which lives on as a zombie); batch 1
    continues the epoch. The zombie's next append meets the retry's barrier and stops with FencedError,
    as in an S2Writer run: nothing is written twice."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=2)
    r0 = open_sink_run(cfg, "w", "q", ["events"])
    zombie_plan = _plan(r0, cfg, 0)
    bodies = [b"z-%d" % i for i in range(4)]
    frame = pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})
    write_partition(zombie_plan, [frame], PartitionContext(0, 0, 0, 10, 0))
    write_partition(_plan(r0, cfg, 0), [frame], PartitionContext(0, 0, 1, 20, 0))  # the retry
    commit_sink_run(cfg, "w", r0, 0, {})
    r1 = open_sink_run(cfg, "w", "q", ["events"])
    assert r1.epoch == r0.epoch
    one = pa.record_batch({"_s2_body": pa.array([b"one"], pa.binary())})
    write_partition(_plan(r1, cfg, 1), [one], PartitionContext(1, 0, 0, 30, 0))  # task ids only grow
    late = pa.record_batch({"_s2_body": pa.array([b"z-late"], pa.binary())})
    with pytest.raises(FencedError):
        write_partition(zombie_plan, [late], PartitionContext(0, 0, 0, 10, 0))
    assert _bodies(lite.endpoint, basin) == Counter([*bodies, b"one"])


def test_the_run_ships_the_ends_by_reference_and_a_commit_elsewhere_reads_them_back(lite: LiteServer) -> None:
    """With more committed streams than travel inline, the run Spark pickles to the tasks carries no ledger
    ends but the static stream's and the ledger position of the rest, from which a task looks any end up;
    a commit in another process than the planning (Spark's commit worker) reads the ends back, so it
    merges the batch's ends into all of them and refuses an end below the ledger's (a reset stream)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    many = {f"r/{i}": i + 1 for i in range(40)}
    r1 = open_sink_run(cfg, "w", "q", ["events"])
    _plan(r1, cfg, 0)
    commit_sink_run(cfg, "w", r1, 0, {"events": 2, **many})

    r2 = open_sink_run(cfg, "w", "q", ["events"])  # continues the epoch: an intent
    shipped: SinkRun = pickle.loads(pickle.dumps(r2))
    assert shipped.before.ends == {}
    assert shipped.opened is not None
    assert shipped.opened.ends == {}
    assert dict(shipped.ends.inline) == {"events": 2}
    assert shipped.ends.state_at is not None
    assert runtime.run(lookup(cfg, shipped.ends, "r/7")) == 8
    assert _plan(shipped, cfg, 1).fencing_token is not None

    new_process()  # the commit runs in another Python worker
    with pytest.raises(StreamResetError, match="r/39"):
        commit_sink_run(cfg, "w", shipped, 1, {"r/39": 3})
    commit_sink_run(cfg, "w", shipped, 1, {"r/39": 41, "r/40": 5})
    state = runtime.run(Ledger(get_pool().client(cfg).basin(cfg.basin), "w", cfg=cfg).load())
    assert (state.kind, state.committed) == ("commit", 1)
    assert state.ends == {"events": 2, **many, "r/39": 41, "r/40": 5}
