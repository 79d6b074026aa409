"""A target stream deleted and recreated under an exactly-once writer (S2's ``delete_on_empty``, or an
operator): its tail is below the end the ledger committed for it. The writer fails closed with
`StreamResetError` naming the stream, both positions and the fix, before writing anything to the new
stream: at a task's 412 (the new stream has no token) or its fence of a stream it created, at a retry's
barrier, at the driver's run-start fence, and at the commit. Block by block against the lite server (no
Spark)."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pyarrow as pa
import pytest
from s2_sdk import S2ServerError

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.ledger import Ledger
from s2_sink._exactly_once.ledger_records import check_not_reset
from s2_sink._exactly_once.sink_run import commit_sink_run, open_sink_run
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext
from s2_sink.config import S2Config
from s2_sink.errors import StreamResetError
from s2_sink.lite import LiteServer
from tests._pools import own_pool
from tests.cli.test_cli import cli
from tests.faults._support import cfg_for, client, make_basin, read_all, run

BATCH0 = [b"b0-%d" % i for i in range(20)]
BATCH1 = [b"b1-%d" % i for i in range(10)]


def _frame(bodies: list[bytes]) -> pa.RecordBatch:
    return pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})


def _committed_batch_0(lite: LiteServer, **kw: Any) -> tuple[S2Config, WriteSpec, Coordinator, int]:
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=5, **kw)
    spec = WriteSpec.build(cfg, Routing.build(stream="events", stream_column=None, shards=None))
    coord = Coordinator(cfg, "w", query_id="q", static_streams=["events"])
    epoch = coord.begin_batch(0)
    assert epoch is not None
    result = write_partition(spec.plan(0, epoch), [_frame(BATCH0)], PartitionContext(0, 0, 0, 1, 7))
    metrics = aggregate(0, result.to_pylist(), 1.0, delivery="exactly-once")
    coord.commit_batch(0, metrics.end_positions())
    return cfg, spec, coord, coord.state.ends["events"]


def _recreate(lite: LiteServer, basin: str) -> None:
    async def go() -> None:
        async with client(lite.endpoint) as s2:
            await s2.basin(basin).delete_stream("events")
            for _ in range(100):  # deletion completes in the background
                try:
                    await s2.basin(basin).create_stream("events")
                    return
                except S2ServerError as exc:
                    if exc.code != "stream_deletion_pending":
                        raise
                    await asyncio.sleep(0.05)
            raise AssertionError("the stream was never deleted")

    run(go())


def _delete(lite: LiteServer, basin: str) -> None:
    """Delete `events` and wait until it is gone (nobody creates it again)."""

    async def go() -> None:
        async with client(lite.endpoint) as s2:
            await s2.basin(basin).delete_stream("events")
            for _ in range(100):  # deletion completes in the background
                try:
                    await s2.basin(basin).stream("events").check_tail()
                except S2ServerError as exc:
                    if exc.status_code == 404:
                        return
                await asyncio.sleep(0.05)
            raise AssertionError("the stream was never deleted")

    run(go())


def _bodies(lite: LiteServer, basin: str) -> Counter[bytes]:
    return Counter(bytes(r.body) for r in run(read_all(lite.endpoint, basin, "events")))


def test_recreated_stream_retry_does_not_rewrite(lite: LiteServer) -> None:
    """Batch 0 (20 rows) is committed; the stream is deleted and recreated; batch 1's task and its retry
    both stop with StreamResetError before writing (before: the first attempt fenced the new stream and
    wrote 10 rows, its retry read back the empty range [21, 11) and wrote the same 10 rows again)."""
    cfg, spec, coord, end = _committed_batch_0(lite)
    assert end > len(BATCH1)
    _recreate(lite, cfg.basin)
    epoch = coord.begin_batch(1)
    assert epoch is not None
    plan = spec.plan(1, epoch)
    for attempt, task_id in ((0, 10), (1, 20)):
        with pytest.raises(StreamResetError) as refused:
            write_partition(plan, [_frame(BATCH1)], PartitionContext(1, 0, attempt, task_id, 7))
        message = str(refused.value)
        assert "'events'" in message
        assert f"ends at 0, below the end {end} " in message
        assert "`s2-sink ledger forget w events`" in message  # the actual writer id, ready to run
    assert _bodies(lite, cfg.basin) == Counter()


def test_restart_after_recreation_fails_at_the_run_start_fence(lite: LiteServer) -> None:
    """A new run (driver restart) after the stream was recreated: the driver's run-start fence reads the
    tail before fencing the token-less new stream and refuses, so no task ever appends to it with a token
    the new stream would accept."""
    cfg, _, _, end = _committed_batch_0(lite)
    _recreate(lite, cfg.basin)
    restarted = Coordinator(cfg, "w", query_id="q", static_streams=["events"])
    with pytest.raises(StreamResetError, match=f"ends at 0, below the end {end} "):
        restarted.begin_batch(1)
    assert run(read_all(lite.endpoint, cfg.basin, "events", commands=True)) == []


def test_commit_refuses_ends_below_the_ledgers() -> None:
    """The commit's backstop: acks that end below the ledger's end for a stream (a stream recreated under
    the batch) are refused rather than recorded; streams at or past it, or new ones, pass."""
    check_not_reset({"a": 10, "b": 5}, {"a": 10, "b": 7, "c": 1}, "w")
    with pytest.raises(StreamResetError, match=r"'b' ends at 4, below the end 5.*ledger forget w b"):
        check_not_reset({"a": 10, "b": 5}, {"a": 12, "b": 4}, "w")


def test_ledger_forget_lets_the_writer_go_on_with_the_new_stream(lite: LiteServer) -> None:
    """The way forward the error names: `s2-sink ledger forget` refuses a stream that was not reset (exit
    2), drops the recreated stream's end, and the restarted writer replays the batch in recovery mode,
    writes it to the new stream exactly once and commits the new stream's end."""
    cfg, _, _, end = _committed_batch_0(lite)
    refused = cli(lite.endpoint, "ledger", "forget", "w", "events", "--basin", cfg.basin)
    assert refused.returncode == 2, refused.stderr
    assert "it was not reset" in refused.stderr
    _recreate(lite, cfg.basin)

    done = cli(lite.endpoint, "ledger", "forget", "w", "events", "--basin", cfg.basin)
    assert done.returncode == 0, done.stderr
    assert f"forgot the end {end} of stream 'events' (now ending at 0)" in done.stdout

    spec = WriteSpec.build(cfg, Routing.build(stream="events", stream_column=None, shards=None))
    restarted = Coordinator(cfg, "w", query_id="q", static_streams=["events"])
    epoch = restarted.begin_batch(1)
    assert epoch is not None
    assert epoch.recovery
    assert "events" not in restarted.state.ends
    plan = spec.plan(1, epoch)
    write_partition(plan, [_frame(BATCH1[:5])], PartitionContext(1, 0, 0, 1, 7))  # then the driver dies
    restarted = Coordinator(cfg, "w", query_id="q", static_streams=["events"])
    epoch = restarted.begin_batch(1)
    assert epoch is not None
    result = write_partition(spec.plan(1, epoch), [_frame(BATCH1)], PartitionContext(1, 0, 0, 1, 7))
    metrics = aggregate(1, result.to_pylist(), 1.0, delivery="exactly-once")
    check_not_reset(restarted.state.ends, metrics.end_positions(), "w")
    restarted.commit_batch(1, metrics.end_positions())
    assert _bodies(lite, cfg.basin) == Counter(BATCH1)
    assert restarted.state.ends["events"] == metrics.end_positions()["events"] < end


@pytest.mark.parametrize(("attempt", "task_id"), [(0, 10), (1, 20)])
def test_a_stream_deleted_under_a_process_that_created_it_is_a_reset(
    lite: LiteServer, attempt: int, task_id: int
) -> None:
    """With ``create_streams``, this process created the stream and remembers it; then the stream is deleted
    (S2's ``delete_on_empty``) and nobody creates it. Batch 1's first attempt (its appends get 404) and a
    retry (its barrier is the first request) create it again and stop with StreamResetError before
    writing. Before: both failed with a 404 "stream not found" that said nothing of the deletion, on every
    retry in that process, since its cache said the stream existed."""
    cfg, spec, coord, end = _committed_batch_0(lite, create_streams=True)
    _delete(lite, cfg.basin)
    epoch = coord.begin_batch(1)
    assert epoch is not None
    with pytest.raises(StreamResetError, match=f"'events' ends at 0, below the end {end} "):
        write_partition(spec.plan(1, epoch), [_frame(BATCH1)], PartitionContext(1, 0, attempt, task_id, 7))
    assert run(read_all(lite.endpoint, cfg.basin, "events", commands=True)) == []


def test_a_deleted_stream_created_by_a_process_new_to_it_is_a_reset(lite: LiteServer) -> None:
    """With ``create_streams``, a worker process that never met the stream creates it (201) after its
    deletion and fences it before the first append, as any stream it created: that fence reads the tail
    against the ledger's end first and stops with StreamResetError, with nothing written."""
    cfg, spec, coord, end = _committed_batch_0(lite, create_streams=True)
    _delete(lite, cfg.basin)
    epoch = coord.begin_batch(1)
    assert epoch is not None
    with own_pool(), pytest.raises(StreamResetError, match=f"'events' ends at 0, below the end {end} "):
        write_partition(spec.plan(1, epoch), [_frame(BATCH1)], PartitionContext(1, 0, 0, 30, 7))
    assert run(read_all(lite.endpoint, cfg.basin, "events", commands=True)) == []


def test_at_least_once_writes_on_to_a_stream_deleted_under_its_process(lite: LiteServer) -> None:
    """At-least-once with ``create_streams``: a stream deleted after this process created it is created
    again and written (before: every later append in the process failed with 404, its cache saying the
    stream existed)."""
    basin = make_basin(lite.endpoint)
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=5, create_streams=True)
    spec = WriteSpec.build(
        cfg, Routing.build(stream="events", stream_column=None, shards=None), delivery="at-least-once"
    )
    write_partition(spec.plan(0), [_frame(BATCH0)], PartitionContext(0, 0, 0, 1, 7))
    _delete(lite, basin)
    write_partition(spec.plan(1), [_frame(BATCH1)], PartitionContext(1, 0, 0, 2, 8))
    assert _bodies(lite, basin) == Counter(BATCH1)


def test_the_format_sink_commit_refuses_ends_below_the_ledgers(lite: LiteServer) -> None:
    """``format("s2")``'s commit checks the ends too: an execution whose tasks report a stream end below
    the ledger's (they wrote into the stream recreated under the batch) stops with StreamResetError and
    the ledger keeps its last commit. Before, the commit kept the old end as the maximum, so readers would
    later cap at it inside the new stream's records of uncommitted batches."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin)
    first = open_sink_run(cfg, "w", "q", ["events"])
    commit_sink_run(cfg, "w", first, 0, {"events": 21}, query_id="q")
    second = open_sink_run(cfg, "w", "q", ["events"])
    with pytest.raises(StreamResetError, match="'events' ends at 6, below the end 21"):
        commit_sink_run(cfg, "w", second, 1, {"events": 6}, query_id="q")

    async def state() -> tuple[int, dict[str, int]]:
        ledger = Ledger(get_pool().client(cfg).basin(basin), "w", cfg=cfg)
        st = await ledger.load()
        return st.committed, dict(st.ends)

    assert _runtime.run(state()) == (0, {"events": 21})
