"""Task attempts under one epoch, block by block against the lite server (no Spark): a retry's barrier
is never adopted by an earlier attempt of the same partition (a zombie), attempts are ordered by Spark's
task id (a stage retry restarts attempt numbers, SPARK-24552), and live siblings still adopt it."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pyarrow as pa
import pytest

from s2_sink._exactly_once.epoch_plan import epoch_plan
from s2_sink._exactly_once.fencing import Token, fence_if_older, writer_hash
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.errors import FencedError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, client, make_basin, read_all, run

P0 = [b"p0-%d" % i for i in range(10)]
P1 = [b"p1-%d" % i for i in range(10)]


def _plan(cfg: S2Config) -> WritePlan:
    spec = WriteSpec.build(cfg, Routing.build(stream="events", stream_column=None, shards=None))
    return spec.plan(0, epoch_plan(cfg, writer_hash("w"), 1, {}, recovery=False, writer_id="w"))


def _write(plan: WritePlan, bodies: list[bytes], *, partition: int, attempt: int, task_id: int) -> None:
    frame = pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})
    write_partition(plan, [frame], PartitionContext(0, partition, attempt, task_id, 7))


def _bodies(endpoint: str, basin: str) -> Counter[bytes]:
    return Counter(bytes(r.body) for r in run(read_all(endpoint, basin, "events")))


def _fence_tokens(endpoint: str, basin: str) -> list[Token | None]:
    records = run(read_all(endpoint, basin, "events", commands=True))
    return [Token.parse(bytes(r.body).decode()) for r in records if r.headers == [(b"", b"fence")]]


@pytest.mark.parametrize(
    ("zombie_attempt", "zombie_task", "retry_attempt", "retry_task"),
    [
        (0, 10, 1, 20),  # a task retry; the first attempt lives on
        (2, 15, 1, 30),  # a stage retry restarted attempt numbers: the later attempt has the lower number
    ],
)
def test_zombie_attempt_never_adopts_a_later_attempts_barrier(
    lite: LiteServer, zombie_attempt: int, zombie_task: int, retry_attempt: int, retry_task: int
) -> None:
    """The earlier attempt wrote its partition; the later one fenced, read it back and wrote nothing new;
    the earlier one keeps appending (its 412 names a newer generation of its own run): it stops with
    FencedError instead of adopting the barrier, and nothing is duplicated. A live sibling that started
    before the barrier adopts it and writes its partition."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    plan = _plan(cfg)
    _write(plan, P0, partition=0, attempt=zombie_attempt, task_id=zombie_task)
    _write(plan, P0, partition=0, attempt=retry_attempt, task_id=retry_task)
    assert _bodies(lite.endpoint, basin) == Counter(P0)
    barrier = _fence_tokens(lite.endpoint, basin)[-1]
    assert barrier is not None
    assert barrier.gen >= 1  # 2 when the earlier attempt (a retry itself) bumped first
    assert barrier.by is not None
    assert (barrier.by.partition, barrier.by.task_id) == (0, retry_task)

    with pytest.raises(FencedError, match="superseded by a later attempt"):
        _write(plan, P0[5:], partition=0, attempt=zombie_attempt, task_id=zombie_task)
    _write(plan, P1, partition=1, attempt=0, task_id=zombie_task + 1)  # a sibling: adopts and writes
    assert _bodies(lite.endpoint, basin) == Counter(P0 + P1)


def test_zombie_is_refused_after_a_siblings_later_barrier_hides_its_own(lite: LiteServer) -> None:
    """The token names only the last bump: partition 0 was retried, then partition 1. The zombie of
    partition 0 sees partition 1's barrier, finds partition 0's among the stream's fence records, and
    stops; its own retry barrier (a zombie that is itself a retry) is refused the same way."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    plan = _plan(cfg)
    _write(plan, P0, partition=0, attempt=0, task_id=10)
    _write(plan, P1, partition=1, attempt=0, task_id=11)
    _write(plan, P0, partition=0, attempt=1, task_id=20)
    _write(plan, P1, partition=1, attempt=1, task_id=21)
    last = _fence_tokens(lite.endpoint, basin)[-1]
    assert last is not None
    assert last.by is not None
    assert last.by.partition == 1
    with pytest.raises(FencedError, match="superseded"):
        _write(plan, P0, partition=0, attempt=0, task_id=10)
    with pytest.raises(FencedError, match="superseded"):
        _write(plan, P0, partition=0, attempt=1, task_id=19)  # a retry launched before task 20
    assert _bodies(lite.endpoint, basin) == Counter(P0 + P1)


def test_bump_tokens_fit_s2s_limit() -> None:
    """A barrier token names the attempt, all in base 36, within 36 bytes for long runs and big jobs; the
    plain token is base 36 too (one encoding), and an earlier version's decimal one still parses."""
    from s2_sink._exactly_once.fencing import MAX_TOKEN_BYTES, TaskAttempt

    assert str(Token(epoch=12, gen=0, writer="abcdef01")) == "s2sink:abcdef01:c.0~"
    assert Token.parse("s2sink:abcdef01:12.0") == Token(epoch=12, gen=0, writer="abcdef01")
    assert Token.parse("s2sink:abcdef01:1z.0") is None
    token = Token(epoch=1_600_000, gen=1001, writer="abcdef01", by=TaskAttempt(46_655, 2_000_000_000))
    assert len(token.encode()) <= MAX_TOKEN_BYTES
    assert Token.parse(token.encode()) == token
    assert Token.parse(token.encode()).by == TaskAttempt(46_655, 2_000_000_000)  # type: ignore[union-attr]


def test_stage_retry_with_attempt_number_zero_reads_back(lite: LiteServer) -> None:
    """A stage retry (FetchFailed) restarts attempt numbers at 0: the retry's attempt of partition 0 has
    attempt number 0 like the first one, which wrote half the partition before it failed. The roll call
    tells the retry an earlier attempt signed in, so it reads back and writes only the other half; a
    sibling partition that ran once is untouched."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    plan = _plan(cfg)
    _write(plan, P0[:5], partition=0, attempt=0, task_id=10)  # the first stage attempt, cut short
    _write(plan, P1, partition=1, attempt=0, task_id=11)
    _write(plan, P0, partition=0, attempt=0, task_id=30)  # the stage retry's first attempt
    assert _bodies(lite.endpoint, basin) == Counter(P0 + P1)
    barrier = _fence_tokens(lite.endpoint, basin)[-1]
    assert barrier is not None
    assert barrier.by is not None
    assert (barrier.by.partition, barrier.by.task_id) == (0, 30)


def test_attempt_that_signs_in_after_a_later_one_writes_nothing(lite: LiteServer) -> None:
    """A zombie of the first stage attempt that only starts after the retry's attempt signed in stops at
    its own sign-in, before writing anything."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    plan = _plan(cfg)
    _write(plan, P0, partition=0, attempt=0, task_id=30)
    with pytest.raises(FencedError, match=r"superseded by a later attempt .* before it started writing"):
        _write(plan, P0, partition=0, attempt=0, task_id=10)
    assert _bodies(lite.endpoint, basin) == Counter(P0)


def test_attempt_of_a_batch_its_partition_moved_past_writes_nothing(lite: LiteServer) -> None:
    """Once an attempt of the next micro-batch signed in for partition 0, a late retry of the earlier
    micro-batch (a higher attempt number, but the query moved on) stops before writing."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    plan = _plan(cfg)
    _write(plan, P0, partition=0, attempt=0, task_id=10)
    frame = pa.record_batch({"_s2_body": pa.array(P1, pa.binary())})
    write_partition(plan, [frame], PartitionContext(1, 0, 0, 11, 7))  # micro-batch 1, partition 0
    with pytest.raises(FencedError, match="moved past this micro-batch"):
        _write(plan, P0, partition=0, attempt=1, task_id=20)
    assert _bodies(lite.endpoint, basin) == Counter(P0 + P1)


def test_zombie_writing_on_is_stopped_by_its_register_when_another_partitions_barrier_is_last(
    lite: LiteServer,
) -> None:
    """Partition 0's first attempt is still writing when its retry (task 20) puts up a barrier and writes
    the partition, and then partition 1's retry puts up the stream's last barrier. The first attempt's next
    append gets a 412 naming partition 1's generation, which it could adopt; its zombie check reads its
    partition's register, finds the later sign-in of task 20 and stops: nothing is written twice."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    plan = _plan(cfg)

    async def run_start_fence() -> None:  # as the driver fences a static stream when the run opens
        async with client(lite.endpoint) as s2:
            await fence_if_older(s2.basin(basin).stream("events"), Token(1, 0, writer_hash("w")))

    run(run_start_fence())

    def frames() -> Iterator[pa.RecordBatch]:
        yield pa.record_batch({"_s2_body": pa.array(P0[:5], pa.binary())})
        deadline = time.monotonic() + 30
        while sum(_bodies(lite.endpoint, basin).values()) < 4:  # its first append landed (no 412 yet)
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # While the first attempt is between two Arrow batches, its retry and partition 1's run (threads
        # of their own, as Spark's tasks: each has its own task context).
        _in_thread(lambda: _write(plan, P0, partition=0, attempt=1, task_id=20))
        _in_thread(lambda: _write(plan, P1, partition=1, attempt=1, task_id=21))
        yield pa.record_batch({"_s2_body": pa.array(P0[5:], pa.binary())})

    with pytest.raises(FencedError, match="superseded"):
        write_partition(plan, frames(), PartitionContext(0, 0, 0, 10, 7))
    last = _fence_tokens(lite.endpoint, basin)[-1]
    assert last is not None
    assert last.by is not None
    assert last.by.partition == 1
    assert _bodies(lite.endpoint, basin) == Counter(P0 + P1)


def _in_thread(fn: Callable[[], None]) -> None:
    errors: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
            errors.append(exc)

    t = threading.Thread(target=target)
    t.start()
    t.join()
    if errors:
        raise errors[0]
