"""A target stream deleted under a writer while S2 is still removing it. S2 answers such a stream's requests
409 ``stream_deletion_pending`` until the deletion completes (then 404), and an append session that was open
on it 503 ``unavailable``, never 404 (s2-lite: lite/src/backend/streams.rs, delete_stream; streamer.rs,
handle_append and append_permit). Whichever answer a writer meets, it ends where a 404 ends: an
exactly-once writer stops with `StreamResetError` before writing to the new stream, an at-least-once
writer writes to it, and without ``create_streams`` the error names the deletion. Nothing is duplicated.

The lite server here runs on a clock that stands still, so a deletion stays pending until a test moves the
clock (its janitor completes it within a sweep). Block by block, no Spark.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from s2_sdk import AppendInput, Record, S2ServerError

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.ledger import Ledger
from s2_sink._read.planning import lookups
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext
from s2_sink.config import S2Config
from s2_sink.errors import StreamResetError, WriteError
from s2_sink.lite import LiteServer, ManualClock
from tests.faults._support import cfg_for, client, make_basin, read_all, run

BATCH0 = [b"b0-%d" % i for i in range(20)]
BATCH1 = [b"b1-%d" % i for i in range(10)]


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    """The server's time: a deletion completes only once a test moves it on."""
    return ManualClock()


@pytest.fixture(scope="module")
def held(clock: ManualClock) -> Iterator[LiteServer]:
    """A lite server whose deletions stay pending (409) until `clock` moves."""
    with LiteServer(clock=clock) as srv:
        yield srv


def _frame(bodies: list[bytes]) -> pa.RecordBatch:
    return pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})


def _spec(cfg: S2Config, delivery: str = "exactly-once") -> WriteSpec:
    routing = Routing.build(stream="events", stream_column=None, shards=None)
    return WriteSpec.build(cfg, routing, delivery=delivery)  # type: ignore[arg-type]


def _committed_batch_0(srv: LiteServer, **kw: Any) -> tuple[S2Config, WriteSpec, Coordinator, int]:
    basin = make_basin(srv.endpoint, ["events"])
    cfg = cfg_for(srv.endpoint, basin, batch_max_records=5, **kw)
    spec = _spec(cfg)
    coord = Coordinator(cfg, "w", query_id="q", static_streams=["events"])
    epoch = coord.begin_batch(0)
    assert epoch is not None
    result = write_partition(spec.plan(0, epoch), [_frame(BATCH0)], PartitionContext(0, 0, 0, 1, 7))
    metrics = aggregate(0, result.to_pylist(), 1.0, delivery="exactly-once")
    coord.commit_batch(0, metrics.end_positions())
    return cfg, spec, coord, coord.state.ends["events"]


def _delete(srv: LiteServer, basin: str, stream: str = "events") -> None:
    """Delete `stream`; the deletion stays pending until the clock moves."""

    async def go() -> None:
        async with client(srv.endpoint) as s2:
            await s2.basin(basin).delete_stream(stream)

    run(go())


def _pending(srv: LiteServer, basin: str) -> bool:
    async def go() -> bool:
        async with client(srv.endpoint) as s2:
            try:
                await s2.basin(basin).stream("events").check_tail()
            except S2ServerError as exc:
                return exc.code == "stream_deletion_pending"
            return False

    return run(go())


class _CompleteOnceWaited(logging.Handler):
    """Moves the clock past the deletion delay as soon as a writer says it waits for the deletion (it met
    409 stream_deletion_pending: its "waiting for S2" warning), so the deletion completes while it waits;
    `waited` says whether one did (after `within_s` the clock moves anyway, and the test fails on it)."""

    def __init__(self, clock: ManualClock, within_s: float = 30.0) -> None:
        super().__init__(logging.WARNING)
        self.seen = threading.Event()
        logging.getLogger("s2_sink").addHandler(self)
        self.thread = threading.Thread(target=self._complete, args=(clock, within_s), daemon=True)
        self.thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        if "(its deletion is pending)" in record.getMessage():
            self.seen.set()

    def _complete(self, clock: ManualClock, within_s: float) -> None:
        self.seen.wait(within_s)
        clock.advance(5)

    def waited(self) -> bool:
        self.thread.join()
        logging.getLogger("s2_sink").removeHandler(self)
        return self.seen.is_set()


def _bodies(srv: LiteServer, basin: str) -> Counter[bytes]:
    return Counter(bytes(r.body) for r in run(read_all(srv.endpoint, basin, "events")))


def _raises(error: type[Exception], call: Callable[[], object]) -> Exception:
    with pytest.raises(error) as caught:
        call()
    return caught.value


def test_a_pending_deletion_met_by_an_exactly_once_batch_ends_in_a_reset(
    held: LiteServer, clock: ManualClock
) -> None:
    """Batch 0 is committed; the stream is deleted and S2 still answers 409 stream_deletion_pending when
    batch 1 writes (``create_streams``). The writer waits for the deletion to complete, creates the stream
    again and stops with StreamResetError before writing to it. Before: WriteError "request rejected" on
    the 409 (only a 404 was taken for a deleted stream)."""
    cfg, spec, coord, end = _committed_batch_0(held, create_streams=True)
    _delete(held, cfg.basin)
    assert _pending(held, cfg.basin)
    epoch = coord.begin_batch(1)  # the run's token is on the stream: the driver fences nothing
    assert epoch is not None
    done = _CompleteOnceWaited(clock)
    error = _raises(
        StreamResetError,
        lambda: write_partition(spec.plan(1, epoch), [_frame(BATCH1)], PartitionContext(1, 0, 0, 10, 7)),
    )
    assert done.waited()
    assert f"'events' ends at 0, below the end {end} " in str(error)
    assert run(read_all(held.endpoint, cfg.basin, "events", commands=True)) == []


def test_an_open_session_meets_503_and_the_retry_ends_in_a_reset(
    held: LiteServer, clock: ManualClock
) -> None:
    """Batch 1's task has its append session open and its first chunk landed when the stream is deleted
    under it. The session's next append gets 503 unavailable (S2's streamer is gone), which applied nothing;
    the task fails without re-sending under exactly-once, and its retry, meeting the 409 and then the
    completed deletion, stops with StreamResetError. Nothing of batch 1 is written to the new stream."""
    cfg, spec, coord, end = _committed_batch_0(held, create_streams=True)
    epoch = coord.begin_batch(1)
    assert epoch is not None
    plan = spec.plan(1, epoch)

    def frames() -> Iterator[pa.RecordBatch]:
        yield _frame(BATCH1[:5])  # one whole chunk (batch_max_records=5), handed over with its batch
        _wait_for_tail(held, cfg.basin, above=end)  # landed: the session is open on the old stream
        _delete(held, cfg.basin)
        yield _frame(BATCH1[5:])

    done = _CompleteOnceWaited(clock)  # whichever attempt meets the 409 waits it out
    first = _raises(WriteError, lambda: write_partition(plan, frames(), PartitionContext(1, 0, 0, 10, 7)))
    assert "503 unavailable" in str(first), first
    retry = _raises(
        StreamResetError, lambda: write_partition(plan, [_frame(BATCH1)], PartitionContext(1, 0, 1, 20, 7))
    )
    assert done.waited()
    assert f"'events' ends at 0, below the end {end} " in str(retry)
    assert run(read_all(held.endpoint, cfg.basin, "events", commands=True)) == []


def _wait_for_tail(srv: LiteServer, basin: str, above: int, within_s: float = 10.0) -> None:
    """Wait until the stream's tail is past `above` (an append landed)."""

    async def tail() -> int:
        async with client(srv.endpoint) as s2:
            return int((await s2.basin(basin).stream("events").check_tail()).seq_num)

    deadline = time.monotonic() + within_s
    while run(tail()) <= above:
        assert time.monotonic() < deadline, "the first chunk never landed"
        time.sleep(0.02)


def test_at_least_once_writes_once_to_the_stream_created_after_a_pending_deletion(
    held: LiteServer, clock: ManualClock
) -> None:
    """At-least-once with ``create_streams``: a write meeting 409 stream_deletion_pending waits for the
    deletion, creates the stream again and writes the batch there once (before: WriteError on the 409)."""
    basin = make_basin(held.endpoint)
    cfg = cfg_for(held.endpoint, basin, batch_max_records=5, create_streams=True)
    spec = _spec(cfg, "at-least-once")
    write_partition(spec.plan(0), [_frame(BATCH0)], PartitionContext(0, 0, 0, 1, 7))
    _delete(held, basin)
    done = _CompleteOnceWaited(clock)
    write_partition(spec.plan(1), [_frame(BATCH1)], PartitionContext(1, 0, 0, 2, 8))
    assert done.waited()
    assert _bodies(held, basin) == Counter(BATCH1)


def test_without_create_streams_the_error_names_the_deletion(held: LiteServer, clock: ManualClock) -> None:
    """Without ``create_streams`` a write meeting 409 stream_deletion_pending fails at once with a
    WriteError saying the stream is being deleted and what to do (before: "request rejected")."""
    cfg, spec, coord, _ = _committed_batch_0(held)
    _delete(held, cfg.basin)
    epoch = coord.begin_batch(1)
    assert epoch is not None
    error = _raises(
        WriteError,
        lambda: write_partition(spec.plan(1, epoch), [_frame(BATCH1)], PartitionContext(1, 0, 0, 10, 7)),
    )
    assert not isinstance(error, StreamResetError)
    assert "'events'" in str(error)
    assert "is being deleted (409 stream_deletion_pending)" in str(error)
    assert "create it, or set create_streams=True" in str(error)
    clock.advance(5)


def test_readers_take_a_stream_being_deleted_as_gone(held: LiteServer, clock: ManualClock) -> None:
    """A prefix reader's tail lookup leaves out a stream being deleted, as one already gone (before: a
    ReadError on the 409); a read-committed reader takes a ledger being deleted as no ledger."""
    basin = make_basin(held.endpoint, ["events", "kept"])
    cfg = cfg_for(held.endpoint, basin)
    _delete(held, basin)
    assert lookups.tails(cfg, ["events", "kept"], missing_ok=True) == {"kept": 0}

    async def ledger_of(writer: str) -> object:
        ledger = Ledger(get_pool().client(cfg).basin(basin), writer, cfg=cfg)
        await ledger.load()
        async with client(held.endpoint) as s2:
            await s2.basin(basin).stream(ledger.name).append(AppendInput(records=[Record(b"x")]))
            await s2.basin(basin).delete_stream(ledger.name)
        return await ledger.peek()

    assert _runtime.run(ledger_of("w")) is None
    clock.advance(5)
    asyncio.run(asyncio.sleep(0))
