"""Exactly-once for the format("s2") sink, block by block against the lite server (no Spark): one epoch per
micro-batch execution, the ledger commit, and the partition-scoped replay that refuses a replay
partitioned differently from the execution it repairs."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from s2_sink._exactly_once.sink_run import SinkRun, commit_sink_run, open_sink_run
from s2_sink._exactly_once.tags import find_tag
from s2_sink._write.driver.routing import Routing
from s2_sink._write.plan import PartitionContext, WritePlan
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink.config import S2Config
from s2_sink.errors import CommitError, ReplayMismatchError, WriterConflictError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin, read_all, run


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
    """Each execution opens the next epoch; after a committed execution the next one is not a recovery,
    after an uncommitted one it is; a batch the ledger has is planned as "write nothing"; a commit by an
    execution that is no longer the ledger's last one, batch ids going backwards, and a task of another
    query all fail with clear errors."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))
    r1 = open_sink_run(cfg, "w", "q", ["events"])
    assert (r1.epoch, r1.recovery) == (1, False)
    plan = _plan(r1, cfg, 0)
    assert plan.fencing_token is not None
    assert plan.fencing_token.endswith(":1.0")
    _write(plan, 0, [b"a", b"b"])
    commit_sink_run(cfg, "w", r1, 0, {"events": 3})

    r2 = open_sink_run(cfg, "w", "q", ["events"])
    assert (r2.epoch, r2.recovery, r2.before.committed) == (2, False, 0)
    assert r2.plan_batch(0, "q") is None  # the ledger has it
    _plan(r2, cfg, 1)  # planned, then the driver dies before the commit

    r3 = open_sink_run(cfg, "w", "q", ["events"])
    assert (r3.epoch, r3.recovery) == (3, True)
    with pytest.raises(WriterConflictError, match="another driver"):
        commit_sink_run(cfg, "w", r2, 1, {})
    with pytest.raises(WriterConflictError, match="went backwards"):
        r3.plan_batch(-1, "q")
    with pytest.raises(CommitError, match=r"s2\.writer-id"):
        r3.plan_batch(1, "another-query")
    commit_sink_run(cfg, "w", r3, 1, {})
    assert open_sink_run(cfg, "w", "q", ["events"]).recovery is False
    commit_sink_run(cfg, "w", None, 2, {})  # no task reported: committed on top of the open it finds
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
