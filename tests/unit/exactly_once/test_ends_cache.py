"""The last commit's stream ends travel by reference once there are many (`ends_cache`), against a lite
server that counts what it serves: the plan stays small, and a task that needs a stream's end (a retry's
read-back) looks it up in the ledger and reads back from there, not from the stream's start."""

from __future__ import annotations

import asyncio
import itertools
import pickle
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest
from s2_sdk import S2ServerError

from s2_sink._exactly_once import ends_cache
from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.epoch_plan import EpochPlan
from s2_sink._exactly_once.ledger import Ledger, forget_created
from s2_sink._exactly_once.ledger_records import SNAPSHOT_EVERY
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.errors import FencedError
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.faults._support import cfg_for, client, fail_one_read, make_basin, read_all, run, trim_behind_base

STREAMS = [f"r/{i}" for i in range(100)]


@pytest.fixture(scope="module")
def counting() -> Iterator[LiteServer]:
    """A lite server of its own that counts requests and records served."""
    with LiteServer(stats=True) as srv:
        yield srv


def _frame(bodies: list[bytes], targets: list[str]) -> pa.RecordBatch:
    return pa.record_batch({"_s2_body": pa.array(bodies, pa.binary()), STREAM_COLUMN: pa.array(targets)})


def test_retry_on_a_routed_stream_reads_back_from_the_end_looked_up_in_the_ledger(
    counting: LiteServer,
) -> None:
    """After a batch that wrote 100 routed streams, the next batch's plan does not carry their ends (under
    4 KiB pickled, no stream name in it); a task retry on one of them still subtracts what its failed attempt
    wrote, and reads back only the records after the committed end (not the earlier batch's)."""
    assert counting.stats is not None
    basin = fresh_basin(counting.endpoint)
    cfg = S2Config(
        basin=basin, access_token="t", account_endpoint=counting.endpoint, basin_endpoint=counting.endpoint
    )
    spec = WriteSpec.build(cfg, Routing.build(stream=None, stream_column="target", shards=None))
    coord = Coordinator(spec.cfg, "routed-job", query_id=None, static_streams=spec.static_streams())
    ids = itertools.count(1)

    def write(plan: WritePlan, batch: int, frame: pa.RecordBatch, attempt: int = 0) -> list[object]:
        ctx = PartitionContext(batch, 0, attempt, next(ids), batch)
        return list(write_partition(plan, [frame], ctx).to_pylist())

    epoch = coord.begin_batch(0, "run-1")
    assert epoch is not None
    rows = write(spec.plan(0, epoch), 0, _frame([b"first-%d" % i for i in range(100)], STREAMS))
    coord.commit_batch(0, aggregate(0, rows, 0.0, delivery="exactly-once").end_positions())

    epoch = coord.begin_batch(1, "run-1")
    assert epoch is not None
    plan = spec.plan(1, epoch)
    pickled = pickle.dumps(plan)
    assert len(pickled) < 4096
    assert b"r/57" not in pickled

    again = _frame([b"second-%d" % i for i in range(5)], ["r/57"] * 5)
    write(plan, 1, again)  # the first attempt writes, then "fails"
    ends_cache._folds.clear()  # as in a fresh executor process
    before = counting.stats.snapshot()
    write(plan, 1, again, attempt=1)  # the retry: barrier, read back, subtract
    read = (counting.stats.snapshot() - before).records_read
    bodies = Counter(bytes(r.body) for r in run(read_all(counting.endpoint, basin, "r/57")))
    assert bodies == Counter([b"first-57"] + [b"second-%d" % i for i in range(5)])
    # batch 1's take-over fence and 5 records, read by the zombie check's scan and by the read-back (2 x 6);
    # from 0 each would read 8
    assert read["r/57"] <= 12
    assert read["_s2sink/ledger/routed-job"] > 0  # the end came from the ledger


def _plan_after_batch_0(cfg: S2Config, run_id: str, rows_per_stream: int) -> tuple[WritePlan, Coordinator]:
    """Batch 0 routed to `STREAMS` (`rows_per_stream` each) written and committed under writer id
    ``ledger-anew``, and the plan of batch 1 (its ends by reference to the ledger)."""
    spec = WriteSpec.build(cfg, Routing.build(stream=None, stream_column="target", shards=None))
    coord = Coordinator(spec.cfg, "ledger-anew", query_id=None, static_streams=spec.static_streams())
    epoch = coord.begin_batch(0, run_id)
    assert epoch is not None
    bodies = [b"%s-%d" % (run_id.encode(), i) for i in range(100 * rows_per_stream)]
    frame = _frame(bodies, [STREAMS[i % 100] for i in range(len(bodies))])
    rows = list(write_partition(spec.plan(0, epoch), [frame], PartitionContext(0, 0, 0, 1, 0)).to_pylist())
    coord.commit_batch(0, aggregate(0, rows, 0.0, delivery="exactly-once").end_positions())
    epoch = coord.begin_batch(1, run_id)
    assert epoch is not None
    return spec.plan(1, epoch), coord


def test_a_ledger_written_anew_is_not_read_from_an_earlier_ledgers_fold(counting: LiteServer) -> None:
    """An executor process that looked up the ends of a ledger's state record at position P, then meets a
    plan of the same writer id whose ledger was deleted and written anew (its registers deleted too, the
    documented way on) with a state record at the same P, gets the new record's ends. Before, the fold was
    kept by (basin, writer id, position) alone and the old ledger's end came back (here 2 for r/57
    where the new ledger has 4): a task's read-back would start inside the stream's earlier batches."""
    basin = fresh_basin(counting.endpoint)
    cfg = S2Config(
        basin=basin, access_token="t", account_endpoint=counting.endpoint, basin_endpoint=counting.endpoint
    )
    ends_cache._folds.clear()
    old, _ = _plan_after_batch_0(cfg, "run-1", rows_per_stream=1)
    old_ref = _ends(old)
    assert old_ref.state_at is not None
    old_end = _runtime.run(ends_cache.lookup(cfg, old_ref, "r/57"))  # this process keeps the fold

    async def delete_bookkeeping() -> None:
        async with client(counting.endpoint) as s2:
            b = s2.basin(basin)
            names = [s.name for s in (await b.list_streams(prefix="_s2sink/")).items]
            for name in names:
                await b.delete_stream(name)
            for name in names:
                for _ in range(100):  # deletion completes in the background
                    try:
                        await b.stream(name).check_tail()
                    except S2ServerError as exc:
                        if exc.code != "stream_deletion_pending":
                            break
                    await asyncio.sleep(0.05)

    run(delete_bookkeeping())
    forget_created()  # a new driver; the executor process (this one) stays
    new, coord = _plan_after_batch_0(cfg, "run-2", rows_per_stream=2)
    new_ref = _ends(new)
    assert new_ref.state_at == old_ref.state_at  # the collision this test is about
    assert coord._ledger is not None
    assert (
        _runtime.run(ends_cache.lookup(cfg, new_ref, "r/57")) == coord._ledger.state.ends["r/57"] != old_end
    )


def _ends(plan: WritePlan) -> ends_cache.EndsRef:
    epoch = getattr(plan.fence_keeper, "__self__", None)
    assert isinstance(epoch, EpochPlan)
    return epoch.starts


def test_a_late_task_whose_planned_state_record_was_trimmed_stops(lite: LiteServer) -> None:
    """A task planned from a ledger state record whose ends were since trimmed away (a later snapshot's
    trim: the query moved on by more than a snapshot's worth of commits) cannot know where its batch's
    records start: its lookup is a FencedError naming the trim, never the ends of a later state. While the
    records are there, the same reference folds the ends they had."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))
    ends = {f"r/{i}": 1 for i in range(40)}  # more than travel inline: the plan refers to the ledger
    ends_cache._folds.clear()

    async def go() -> None:
        led = Ledger(get_pool().client(cfg).basin(cfg.basin), "w", cfg=cfg)
        await led.load()
        await led.append(led.opened("run", "q"))
        await led.append(led.committed(0, ends))
        ref = ends_cache.EndsRef.of("w", led.state, state_at=led.state_at)
        assert ref.state_at is not None
        assert await ends_cache.lookup(cfg, ref, "r/7") == 1
        ends_cache._folds.clear()  # another executor process: it folds the ledger itself
        for batch in range(1, SNAPSHOT_EVERY + 2):
            await led.append(led.committed(batch, {"r/7": batch + 1}))
        with pytest.raises(FencedError, match="no longer has the state record"):
            await ends_cache.lookup(cfg, ref, "r/7")

    _runtime.run(go())


def test_a_lookup_waits_out_a_transient_read_failure(
    lite: LiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 503 while a task folds a stream's end from the ledger is retried until the delivery deadline, as
    every read of the sink is; it does not fail the task. The lite server fails only appends, so the read
    fails in the SDK (after its own retries, as a read they did not fix)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))
    ends = {f"r/{i}": 1 for i in range(40)}  # more than travel inline: the plan refers to the ledger
    ends_cache._folds.clear()

    async def prepare() -> ends_cache.EndsRef:
        led = Ledger(get_pool().client(cfg).basin(cfg.basin), "w", cfg=cfg)
        await led.load()
        await led.append(led.opened("run", "q"))
        await led.append(led.committed(0, ends))
        return ends_cache.EndsRef.of("w", led.state, state_at=led.state_at)

    ref = _runtime.run(prepare())
    failures = fail_one_read(monkeypatch)
    assert _runtime.run(ends_cache.lookup(cfg, ref, "r/7")) == 1
    assert failures == [0]  # the failure was met, and waited out


def test_a_lookup_in_a_ledger_trimmed_behind_the_records_base_stops(lite: LiteServer) -> None:
    """A trim appended by hand between the planned state record's base and the record itself leaves the
    record but not the earlier commits its ends fold from: the lookup is a FencedError, never the ends of
    the records left (here "a", committed before the trim point, would come back as never written and a
    read-back would start at the stream's position 0)."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint))
    ends_cache._folds.clear()

    async def go() -> None:
        led, at = await trim_behind_base(cfg, "w", "q")
        ref = ends_cache.EndsRef("w", {}, at, led.state.run, led.state.epoch)  # by reference, as a plan
        with pytest.raises(FencedError, match="no longer has the state record"):
            await ends_cache.lookup(cfg, ref, "a")

    _runtime.run(go())
