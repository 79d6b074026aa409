"""A zombie task attempt that keeps appending after its partition's retry put a barrier up, and the stream's
token then stops being this run's: an operator clears the fence (`s2-sink fences clear`), or a new writer
takes over a stream this one has not committed to. Block by block against the lite server (no Spark): the
zombie's next 412 goes through the zombie check and stops; a live task takes the stream back with a new
generation named by itself, never the generation-0 token the zombie appends with."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest
from s2_sdk import AppendInput, CommandRecord

from s2_sink._exactly_once.epoch_plan import epoch_plan
from s2_sink._exactly_once.fencing import TaskAttempt, Token, writer_hash
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.cli._streams_cmd import clear_fence
from s2_sink.config import S2Config
from s2_sink.errors import FencedError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin, read_all, run

ROWS = [b"r-%d" % i for i in range(40)]
"""Partition 0: the zombie's first 8 land before its retry starts (2 more wait in an open chunk)."""
SIBLING = [b"s-%d" % i for i in range(10)]


def _plan(cfg: S2Config) -> WritePlan:
    spec = WriteSpec.build(cfg, Routing.build(stream="events", stream_column=None, shards=None))
    return spec.plan(0, epoch_plan(cfg, writer_hash("w"), 1, {}, recovery=False, writer_id="w"))


def _frame(bodies: list[bytes]) -> pa.RecordBatch:
    return pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})


def _bodies(endpoint: str, basin: str) -> Counter[bytes]:
    return Counter(bytes(r.body) for r in run(read_all(endpoint, basin, "events")))


def _fences(endpoint: str, basin: str) -> list[str]:
    records = run(read_all(endpoint, basin, "events", commands=True))
    return [bytes(r.body).decode() for r in records if r.headers == [(b"", b"fence")]]


def _wait_for(endpoint: str, basin: str, n: int) -> None:
    deadline = time.monotonic() + 10
    while sum(_bodies(endpoint, basin).values()) < n:
        assert time.monotonic() < deadline, f"the zombie's first {n} records never landed"
        time.sleep(0.02)


def _zombie_frames(endpoint: str, basin: str, meanwhile: Callable[[], None]) -> Iterator[pa.RecordBatch]:
    """The zombie's input: 10 rows, then (once its first two appends of 4 landed) `meanwhile` runs — the
    retry and the token change — before the zombie goes on with the other 30 rows, still as the same task
    attempt."""
    yield _frame(ROWS[:10])
    _wait_for(endpoint, basin, 8)
    meanwhile()
    for i in range(10, 40, 10):
        yield _frame(ROWS[i : i + 10])


def _in_thread(fn: Callable[[], object]) -> None:
    """Run another task attempt on its own thread (its own task context), as Spark would."""
    failure: list[BaseException] = []

    def go() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test thread
            failure.append(exc)

    t = threading.Thread(target=go)
    t.start()
    t.join(30)
    if failure:
        raise failure[0]


def _scenario(lite: LiteServer, change_token: Callable[[S2Config, str], None]) -> tuple[str, S2Config]:
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    plan = _plan(cfg)
    run_start = Token(epoch=1, gen=0, writer=writer_hash("w")).encode()

    async def driver_fence() -> None:  # the driver's run-start fence of a static stream
        stream = get_pool().client(cfg).basin(basin).stream("events")
        await stream.append(AppendInput(records=[CommandRecord.fence(run_start)]))

    _runtime.run(driver_fence())

    def retry_then_change() -> None:
        _in_thread(lambda: write_partition(plan, [_frame(ROWS)], PartitionContext(0, 0, 1, 20, 7)))
        assert _bodies(lite.endpoint, basin) == Counter(ROWS)  # the retry read back and wrote 30
        change_token(cfg, basin)

    zombie = _zombie_frames(lite.endpoint, basin, retry_then_change)
    with pytest.raises(FencedError, match="superseded by a later attempt"):
        write_partition(plan, zombie, PartitionContext(0, 0, 0, 10, 7))
    # A live sibling (started before the token changed) takes the stream back and writes its partition.
    _in_thread(lambda: write_partition(plan, [_frame(SIBLING)], PartitionContext(0, 1, 0, 11, 7)))
    return basin, cfg


def _check_exact(lite: LiteServer, basin: str) -> None:
    assert _bodies(lite.endpoint, basin) == Counter(ROWS + SIBLING)
    fences = [Token.parse(t) for t in _fences(lite.endpoint, basin)]
    barrier = next(t for t in fences if t is not None and t.by == TaskAttempt(0, 20))
    last = fences[-1]
    assert last is not None
    assert last.by == TaskAttempt(1, 11)  # the live task's own generation, not generation 0
    assert last.gen > barrier.gen


def test_zombie_after_cleared_fence_is_refused(lite: LiteServer) -> None:
    """An operator clears the fence (the CLI's clear) between the retry's barrier and the zombie's next
    append: the zombie's 412 shows an empty token, the zombie check finds its retry's barrier among the
    stream's fence records and the zombie stops; nothing of its 40 rows is written twice (before: the
    zombie fenced the stream back to generation 0 and wrote 32 of its 40 rows again)."""

    def clear(cfg: S2Config, basin: str) -> None:
        async def go() -> str:
            return await clear_fence(get_pool().client(cfg).basin(basin).stream("events"))

        assert Token.parse(_runtime.run(go())) is not None  # it cleared our retry's barrier

    basin, _ = _scenario(lite, clear)
    assert _fences(lite.endpoint, basin).count("") == 1
    _check_exact(lite, basin)


def test_zombie_after_foreign_takeover_is_refused(lite: LiteServer) -> None:
    """Another exactly-once writer fences a stream this one has not committed to (a take-over) after the
    retry's barrier: the zombie may take the stream back from a foreign writer, but only through the zombie
    check, which stops it; the live sibling takes it back with its own generation. Exactly 40 + 10 rows
    (before: 32 of the zombie's rows twice)."""
    other = Token(epoch=1, gen=0, writer=writer_hash("someone-else")).encode()

    def take_over(cfg: S2Config, basin: str) -> None:
        async def go() -> None:
            stream = get_pool().client(cfg).basin(basin).stream("events")
            await stream.append(AppendInput(records=[CommandRecord.fence(other)]))

        _runtime.run(go())

    basin, _ = _scenario(lite, take_over)
    assert other in _fences(lite.endpoint, basin)
    _check_exact(lite, basin)
