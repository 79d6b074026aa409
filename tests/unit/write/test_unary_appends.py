"""A stream's only append of a task goes out as a unary append, not an append session of its own, and the
first exactly-once batch over many new streams asks the fence keeper about them concurrently; against the
lite server (its request accounting tells unary appends from sessions)."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest
from s2_sdk import S2, Endpoints

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.epoch_plan import EpochPlan
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task import appender
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.integration._s2read import read_stream, read_streams
from tests.unit.write.test_partition_writer import config, ctx, frame, stream_rows

STREAMS = 300
ROWS = 3000  # ten rows per stream, interleaved row by row


@pytest.fixture(scope="module")
def counting() -> Iterator[LiteServer]:
    """A lite server of its own that counts requests by kind, with fault hooks."""
    with LiteServer(stats=True, faults=True) as srv:
        yield srv


def _routed() -> list[pa.RecordBatch]:
    bodies = [str(i).encode() for i in range(ROWS)]
    return [frame(bodies, streams=[f"t/{i % STREAMS:03d}" for i in range(ROWS)])]


def test_a_streams_only_append_of_a_task_is_one_unary_append(counting: LiteServer) -> None:
    """300 streams of ten rows: one unary append each and no append session (before, a session each:
    its headers, data and half-close writes and a runner task, ~20% more client CPU per stream); a stream
    whose chunks close before the end of the input keeps its session."""
    assert counting.stats is not None
    basin = fresh_basin(counting.endpoint)
    before = counting.stats.snapshot()
    plan = WritePlan(cfg=config(counting, basin, create_streams=True), batch_id=0, stream_column="_s2_stream")
    rows = stream_rows(write_partition(plan, _routed(), ctx()))
    kinds = Counter(
        kind for (kind, _), n in (counting.stats.snapshot() - before).requests.items() for _ in range(n)
    )
    assert kinds["append"] == STREAMS
    assert kinds["append_session"] == 0
    assert {r["appends"] for name, r in rows.items() if name is not None} == {1}
    assert [int(r.body) for r in read_stream(counting.endpoint, basin, "t/007")] == list(
        range(7, ROWS, STREAMS)
    )

    before = counting.stats.snapshot()
    big = WritePlan(cfg=config(counting, basin, batch_max_records=1000), batch_id=0, stream="events")
    write_partition(big, [frame([str(i).encode() for i in range(5000)])], ctx())
    counted = (counting.stats.snapshot() - before).requests
    assert counted[("append_session", "events")] == 1
    assert counted[("append", "events")] == 0
    assert [int(r.body) for r in read_stream(counting.endpoint, basin, "events")] == list(range(5000))


def test_unary_appends_refused_are_re_sent_and_land_once(counting: LiteServer) -> None:
    """Unary appends refused with 503 (nothing applied) are re-sent: every row lands once, in order."""
    basin = fresh_basin(counting.endpoint)
    cfg = config(counting, basin, create_streams=True, max_retries=0, retry_delay_ms=10)
    counting.faults.fail_next_appends(5, status=503)
    try:
        plan = WritePlan(cfg=cfg, batch_id=0, stream_column="_s2_stream")
        rows = stream_rows(write_partition(plan, _routed(), ctx()))
    finally:
        counting.faults.clear()
    assert sum(r["retries"] for name, r in rows.items() if name is not None) >= 1
    streams = read_streams(counting.endpoint, basin, [f"t/{s:03d}" for s in range(STREAMS)])
    for s, records in enumerate(streams.values()):
        assert [int(r.body) for r in records] == list(range(s, ROWS, STREAMS))


def test_the_first_exactly_once_batch_asks_the_fence_keeper_about_its_streams_together(
    counting: LiteServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first exactly-once batch routed to 100 new streams the basin creates at their first append: each
    stream's first append is refused (412, no token of ours on it) and the fence keeper fences it; those
    answers are asked concurrently
    (at most `_KEEPERS` at once; before, one stream after the other as the acks were collected), and each
    row lands once."""
    basin = fresh_basin(counting.endpoint)
    cfg = S2Config(
        basin=basin,
        access_token="t",
        account_endpoint=counting.endpoint,
        basin_endpoint=counting.endpoint,
    )
    spec = WriteSpec.build(cfg, Routing.build(stream=None, stream_column="target", shards=None))
    coord = Coordinator(spec.cfg, "first-batch", query_id=None, static_streams=spec.static_streams())
    epoch = coord.begin_batch(0, "run-1")
    assert epoch is not None
    now, most, asked = [0], [0], []
    keep = EpochPlan.keeper

    async def counted(self: EpochPlan, stream: str, current: str) -> str:
        asked.append(stream)
        now[0] += 1
        most[0] = max(most[0], now[0])
        try:
            await asyncio.sleep(0.01)  # an answer takes round trips: let the others start meanwhile
            return await keep(self, stream, current)
        finally:
            now[0] -= 1

    monkeypatch.setattr(EpochPlan, "keeper", counted)
    streams = [f"r/{i}" for i in range(100)]
    bodies = [b"row-%d" % i for i in range(300)]
    batch = pa.record_batch(
        {
            "_s2_body": pa.array(bodies, pa.binary()),
            STREAM_COLUMN: pa.array([streams[i % 100] for i in range(300)]),
        }
    )
    ids = itertools.count(1)
    write_partition(spec.plan(0, epoch), [batch], PartitionContext(0, 0, 0, next(ids), 0))
    assert sorted(asked) == sorted(streams)
    assert 1 < most[0] <= appender._KEEPERS
    got: Counter[bytes] = Counter()
    for records in read_streams(counting.endpoint, basin, streams).values():
        got.update(bytes(r.body) for r in records if not (r.headers and r.headers[0][0] == b""))  # no fences
    assert got == Counter(bodies)


def test_a_stream_deleted_since_it_was_created_is_created_again_for_its_unary_append(
    counting: LiteServer,
) -> None:
    """A routed stream this process created, deleted since (S2's ``delete_on_empty``, or an operator): its
    only append of the next task, a unary append, meets the 404, creates the stream again and lands (before,
    the re-sent unary append skipped the create, met the 404 again and failed the task)."""
    basin = fresh_basin(counting.endpoint)
    plan = WritePlan(
        cfg=config(counting, basin, create_streams=True), batch_id=0, stream_column=STREAM_COLUMN
    )
    write_partition(plan, [frame([b"0"], streams=["gone/0"])], ctx())

    async def delete() -> None:
        endpoints = Endpoints(account=counting.endpoint, basin=counting.endpoint)
        async with S2("test", endpoints=endpoints) as client:
            await client.basin(basin).delete_stream("gone/0")

    asyncio.run(delete())
    rows = stream_rows(write_partition(plan, [frame([b"1"], streams=["gone/0"])], ctx(1)))
    assert rows["gone/0"]["records"] == 1
    assert [r.body for r in read_stream(counting.endpoint, basin, "gone/0")] == [b"1"]


def _by_stream(streams: int, rows: int, size: int, prefix: str) -> list[pa.RecordBatch]:
    """`rows` rows per stream of `size`-byte bodies (their number first), ordered by stream, in two Arrow
    batches that split a stream's rows between them."""
    names = [f"{prefix}/{s:03d}" for s in range(streams) for _ in range(rows)]
    bodies = [b"%d:" % i + b"x" * size for i in range(len(names))]
    half = len(names) // 2 + rows // 2
    return [frame(bodies[:half], streams=names[:half]), frame(bodies[half:], streams=names[half:])]


def _numbers(records: list[object]) -> list[int]:
    return [int(bytes(r.body).split(b":")[0]) for r in records]  # type: ignore[attr-defined]


def _requests(counting: LiteServer, plan: WritePlan, batches: list[pa.RecordBatch]) -> Counter[str]:
    assert counting.stats is not None
    before = counting.stats.snapshot()
    write_partition(plan, batches, ctx())
    return Counter(
        kind for (kind, _), n in (counting.stats.snapshot() - before).requests.items() for _ in range(n)
    )


def test_rows_ordered_by_stream_go_as_one_unary_append_per_stream(counting: LiteServer) -> None:
    """A task told its rows come ordered by stream (`WritePlan.rows_by_stream`, as the writer's split
    sorts them when they outweigh what open chunks may hold) closes each stream's chunk as its last when
    the next stream begins: one unary append per stream and no session, though the rows (1.7 MB) outweigh
    the open chunks' 1 MiB. Not told, the fullest open chunks are shed early, each on a session of its own
    (before, in the 10,000-stream benchmark, about half the streams)."""
    basin = fresh_basin(counting.endpoint)
    cfg = config(counting, basin, create_streams=True, max_inflight_bytes=1024 * 1024)
    batches = _by_stream(200, 20, 400, "told")
    told = _requests(
        counting, WritePlan(cfg=cfg, batch_id=0, stream_column="_s2_stream", rows_by_stream=True), batches
    )
    assert (told["append"], told["append_session"]) == (200, 0)
    for s, records in enumerate(
        read_streams(counting.endpoint, basin, [f"told/{s:03d}" for s in range(200)]).values()
    ):
        assert _numbers(records) == list(range(s * 20, s * 20 + 20))
    untold = _requests(
        counting,
        WritePlan(cfg=cfg, batch_id=0, stream_column="_s2_stream"),
        _by_stream(200, 20, 400, "untold"),
    )
    assert untold["append_session"] > 0


def test_a_stream_whose_rows_were_said_to_have_ended_waits_for_its_unary_append(counting: LiteServer) -> None:
    """Rows said to be ordered by stream that are not (each Arrow batch sorted on its own): a stream's chunk
    sent as its last, a unary append, and more of the stream after it. The later chunk waits until the unary
    append lands, so when that one is refused (503) and re-sent, the stream's rows still land in order
    (without the wait, the later chunk went on a session meanwhile and landed first)."""
    basin = fresh_basin(counting.endpoint)
    cfg = config(counting, basin, create_streams=True, max_retries=0, retry_delay_ms=10)
    names = [f"again/{s}" for s in range(3) for _ in range(5)]
    batches = [frame([b"%d:" % (i + 15 * b) for i in range(15)], streams=names) for b in range(2)]
    counting.faults.fail_next_appends(2, status=503)
    try:
        plan = WritePlan(cfg=cfg, batch_id=0, stream_column="_s2_stream", rows_by_stream=True)
        rows = stream_rows(write_partition(plan, batches, ctx()))
    finally:
        counting.faults.clear()
    assert sum(r["retries"] for name, r in rows.items() if name is not None) >= 1
    for s, records in enumerate(
        read_streams(counting.endpoint, basin, [f"again/{s}" for s in range(3)]).values()
    ):
        assert _numbers(records) == [*range(5 * s, 5 * s + 5), *range(15 + 5 * s, 20 + 5 * s)]
