"""Recovery of an `S2Writer` micro-batch a dead run partly wrote, block by block against the lite server
(no Spark): the replay's layout by fingerprinted content, and the tasks' ownership checks.

The frames are what ``InsertEncoder("raw", key_column="k")`` produces: the value as ``_s2_body`` and the
key as ``_s2_key``, which routes but is not written, so identical values under different keys are
identical records."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pyarrow as pa
import pytest

from s2_sink._exactly_once.epoch_plan import epoch_plan, plan_with_layout
from s2_sink._exactly_once.fencing import writer_hash
from s2_sink._exactly_once.readback import ReadBack, fingerprint, read_back
from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.errors import ReplayMismatchError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin, read_all, run

Row = tuple[bytes, bytes]  # (key, value)
_ROWS: list[Row] = [(key, b"value-%d" % (i % 5)) for i in range(30) for key in (b"a", b"b")]
"""60 rows: each value 12 times, under both keys."""


def _plan(cfg: S2Config, epoch: int, *, recovery: bool) -> WritePlan:
    spec = WriteSpec.build(cfg, Routing.build(stream="events", stream_column=None, shards=None))
    return spec.plan(0, epoch_plan(cfg, writer_hash("w"), epoch, {}, recovery=recovery, writer_id="w"))


def _write_tasks(plan: WritePlan, tasks: int, place: Callable[[Row], int]) -> None:
    by_task: dict[int, list[Row]] = {}
    for row in _ROWS:
        by_task.setdefault(place(row), []).append(row)
    for task in range(tasks):
        rows = by_task.get(task, [])
        frame = pa.record_batch(
            {
                "_s2_body": pa.array([v for _, v in rows], pa.binary()),
                "_s2_key": pa.array([k for k, _ in rows]),
            }
        )
        write_partition(plan, [frame], PartitionContext(0, task, 0, 0, 0))


def _dead_run_wrote_key_a(cfg: S2Config) -> None:
    """A first run partitioned by key: the task of key "a" wrote, then the driver died."""
    plan = _plan(cfg, 1, recovery=False)
    rows = [v for k, v in _ROWS if k == b"a"]
    write_partition(
        plan, [pa.record_batch({"_s2_body": pa.array(rows, pa.binary())})], PartitionContext(0, 0, 0, 0, 0)
    )


def _bodies(endpoint: str, basin: str) -> Counter[bytes]:
    return Counter(bytes(r.body) for r in run(read_all(endpoint, basin, "events")))


def test_replay_laid_out_by_content_writes_every_row_once(lite: LiteServer) -> None:
    """Several recovery tasks, identical values under different keys: with the replay laid out by what the
    fingerprint covers, every copy of a value is in one task, which subtracts the dead run's copies once."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    _dead_run_wrote_key_a(cfg)
    layout = RecoveryLayout(partitions=4, routed=False)
    assert len({layout.partition_of("events", [], v) for _, v in _ROWS}) > 1  # really several tasks
    replay = plan_with_layout(_plan(cfg, 2, recovery=True), layout)
    _write_tasks(replay, 4, lambda row: layout.partition_of("events", [], row[1]))
    assert _bodies(lite.endpoint, basin) == Counter(v for _, v in _ROWS)


def test_replay_laid_out_by_key_loses_rows_without_the_ownership_check(lite: LiteServer) -> None:
    """The failure the layout prevents: laid out by key (what the recovery shuffle used to include), both
    keys' tasks subtract the same earlier copies, and the values of key "b" are lost."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    _dead_run_wrote_key_a(cfg)
    _write_tasks(_plan(cfg, 2, recovery=True), 2, lambda row: 0 if row[0] == b"a" else 1)
    written = _bodies(lite.endpoint, basin)
    assert sum(written.values()) == len(_ROWS) // 2  # half the rows lost


def test_task_holding_rows_it_does_not_own_refuses_before_writing(lite: LiteServer) -> None:
    """The same key layout under the ownership check: the first task whose rows are not all its own under
    the content layout refuses with ReplayMismatchError before writing anything, so nothing is lost or
    duplicated, and a replay laid out by content then completes the batch."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    _dead_run_wrote_key_a(cfg)
    layout = RecoveryLayout(partitions=2, routed=False)
    replay = plan_with_layout(_plan(cfg, 2, recovery=True), layout)
    with pytest.raises(ReplayMismatchError, match="belongs to partition"):
        _write_tasks(replay, 2, lambda row: 0 if row[0] == b"a" else 1)
    assert sum(_bodies(lite.endpoint, basin).values()) == len(_ROWS) // 2  # only the dead run's
    again = plan_with_layout(_plan(cfg, 3, recovery=True), layout)
    _write_tasks(again, 2, lambda row: layout.partition_of("events", [], row[1]))
    assert _bodies(lite.endpoint, basin) == Counter(v for _, v in _ROWS)


def test_dead_letters_of_a_replay_are_written_once(lite: LiteServer) -> None:
    """Dead letters are exactly-once like data: the dead run wrote half the batch from partition 0, bad rows
    dead-lettered; the replay, laid out by content, holds those bad rows in other tasks, which subtract
    the earlier dead letters anyway (the partition header is where a dead letter came from, not what it
    is), and dead-letters the other half's bad rows once."""
    basin = make_basin(lite.endpoint, ["events", "dlq"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    spec = WriteSpec.build(
        cfg, Routing.build(stream="events", stream_column=None, shards=None), on_error="dlq", dlq_stream="dlq"
    )
    bodies = [b"row-%d" % i for i in range(24)]
    errors = [f"bad value in row {i}" if i % 3 == 0 else None for i in range(24)]
    layout = RecoveryLayout(partitions=4, routed=False)

    def frame(rows: list[int]) -> pa.RecordBatch:
        return pa.record_batch(
            {
                "_s2_body": pa.array([bodies[i] for i in rows], pa.binary()),
                "_s2_error": pa.array([errors[i] for i in rows], pa.string()),
            }
        )

    dead = spec.plan(0, epoch_plan(cfg, writer_hash("w"), 1, {}, recovery=False, writer_id="w"))
    write_partition(dead, [frame(list(range(12)))], PartitionContext(0, 0, 0, 0, 0))
    owners = {layout.partition_of("events", [], bodies[i]) for i in range(12) if errors[i]}
    assert owners - {0}  # some of the dead run's bad rows are in another task in the replay

    replay = plan_with_layout(
        spec.plan(0, epoch_plan(cfg, writer_hash("w"), 2, {}, recovery=True, writer_id="w")), layout
    )
    for task in range(4):
        rows = [i for i in range(24) if layout.partition_of("events", [], bodies[i]) == task]
        write_partition(replay, [frame(rows)], PartitionContext(0, task, 0, 0, 0))
    letters = run(read_all(lite.endpoint, basin, "dlq"))
    assert Counter(bytes(r.body) for r in letters) == Counter(bodies[i] for i in range(24) if errors[i])
    assert {dict(r.headers)[b"s2sink-partition"] for r in letters} - {b"0"}  # the replay wrote some
    assert _bodies(lite.endpoint, basin) == Counter(bodies[i] for i in range(24) if not errors[i])


def test_distinct_bad_rows_with_identical_dead_letters_are_each_written_once(lite: LiteServer) -> None:
    """Eight bad rows that differ only in a header make the same payload, error and target: without the
    row's content hash in the dead letter they would be identical dead letters spread over the replay's
    tasks, each subtracting the dead run's copies (dead letters lost). With it, each is written once, and
    every replay task holds only dead letters whose row it owns."""
    basin = make_basin(lite.endpoint, ["events", "dlq"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    spec = WriteSpec.build(
        cfg, Routing.build(stream="events", stream_column=None, shards=None), on_error="dlq", dlq_stream="dlq"
    )
    headers_type = pa.list_(pa.struct([("name", pa.binary()), ("value", pa.binary())]))
    headers = [[{"name": b"h", "value": b"%d" % i}] for i in range(8)]
    layout = RecoveryLayout(partitions=4, routed=False)
    owners = [layout.partition_of("events", [(b"h", b"%d" % i)], b"same") for i in range(8)]
    assert len(set(owners)) > 1

    def frame(rows: list[int]) -> pa.RecordBatch:
        return pa.record_batch(
            {
                "_s2_body": pa.array([b"same"] * len(rows), pa.binary()),
                "_s2_headers": pa.array([headers[i] for i in rows], headers_type),
                "_s2_error": pa.array(["unparseable"] * len(rows), pa.string()),
            }
        )

    dead = spec.plan(0, epoch_plan(cfg, writer_hash("w"), 1, {}, recovery=False, writer_id="w"))
    write_partition(dead, [frame([0, 1, 2, 3])], PartitionContext(0, 0, 0, 0, 0))
    replay = plan_with_layout(
        spec.plan(0, epoch_plan(cfg, writer_hash("w"), 2, {}, recovery=True, writer_id="w")), layout
    )
    for task in range(4):
        rows = [i for i in range(8) if owners[i] == task]
        write_partition(replay, [frame(rows)], PartitionContext(0, task, 0, 0, 0))
    letters = run(read_all(lite.endpoint, basin, "dlq"))
    assert len(letters) == 8
    assert len({dict(r.headers)[b"s2sink-row-hash"] for r in letters}) == 8


def test_read_back_counts_only_the_records_a_task_owns(lite: LiteServer) -> None:
    """A replay task subtracts only fingerprints it owns: read back with an ownership predicate, the dead
    run's records of other tasks are counted as not owned, not as copies to subtract."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    _dead_run_wrote_key_a(cfg)
    layout = RecoveryLayout(partitions=4, routed=False)
    values = [v for k, v in _ROWS if k == b"a"]

    async def go(task: int) -> ReadBack:
        stream = get_pool().client(cfg).basin(cfg.basin).stream("events")
        return await read_back(
            stream,
            writer=writer_hash("w"),
            start=0,
            match=lambda tag: tag.batch == 0,
            owns=lambda headers, body: layout.partition_of("events", headers, body) == task,
        )

    for task in range(4):
        found = _runtime.run(go(task))
        mine = [v for v in values if layout.partition_of("events", [], v) == task]
        assert found.fingerprints == Counter(fingerprint("events", [], v) for v in mine)
        assert found.not_owned == len(values) - len(mine)
