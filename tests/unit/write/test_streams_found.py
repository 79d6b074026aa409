"""A routed task does not ask S2 to create the streams the writer's previous micro-batch appended to
(`WritePlan.streams_found`), whichever worker process it runs in; one of them deleted since is created at
its append's 404. Against the lite server, whose request accounting counts the create requests."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator

import pytest
from s2_sdk import S2, Endpoints, S2ServerError

from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import WritePlan
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests import _pools as pools
from tests.integration._s2read import read_stream, read_streams
from tests.unit.write.test_partition_writer import config, ctx, frame, stream_rows

STREAMS = 200


@pytest.fixture(scope="module")
def counting() -> Iterator[LiteServer]:
    """A lite server of its own that counts requests by kind."""
    with LiteServer(stats=True) as srv:
        yield srv


@pytest.fixture
def new_process() -> Iterator[None]:
    """A pool with no clients and no streams met, as in a worker process new to these streams."""
    with pools.own_pool():
        yield


def _kinds(counting: LiteServer, plan: WritePlan, batch: int) -> Counter[str]:
    """The requests of one task writing one row to each of the `STREAMS` streams, by kind."""
    assert counting.stats is not None
    names = [f"t/{s:03d}" for s in range(STREAMS)]
    before = counting.stats.snapshot()
    rows = stream_rows(write_partition(plan, [frame([b"%d" % batch] * STREAMS, streams=names)], ctx(batch)))
    assert all(rows[n]["records"] == 1 for n in names)
    return Counter(
        kind for (kind, _), n in (counting.stats.snapshot() - before).requests.items() for _ in range(n)
    )


def test_streams_the_previous_batch_wrote_are_not_created_again_by_a_new_worker(
    counting: LiteServer, new_process: None
) -> None:
    """A worker process meeting 200 streams the previous batch appended to sends one append each and no
    create request (before, a create each, answered 409 ``resource_already_exists``: in the 10,000-stream
    benchmark, whenever Spark ran a partition in the other worker than the batch before, ~2 us/row)."""
    basin = fresh_basin(counting.endpoint)
    cfg = config(counting, basin, create_streams=True)
    first = _kinds(counting, WritePlan(cfg=cfg, batch_id=0, stream_column="_s2_stream"), 0)
    assert first["control"] == STREAMS  # the first batch creates them
    pools.new_process()
    found = frozenset(f"t/{s:03d}" for s in range(STREAMS))
    plan = WritePlan(cfg=cfg, batch_id=1, stream_column="_s2_stream", streams_found=found)
    assert _kinds(counting, plan, 1) == Counter(append=STREAMS)
    for records in read_streams(counting.endpoint, basin, sorted(found)).values():
        assert [r.body for r in records] == [b"0", b"1"]


@pytest.mark.parametrize(
    ("gone", "on_append", "creates"),
    [("pending", False, None), ("done", False, 2), ("done", True, 0)],
)
def test_a_found_stream_deleted_since_is_created_at_its_appends_404(
    counting: LiteServer, new_process: None, gone: str, on_append: bool, creates: int | None
) -> None:
    """Streams the previous batch wrote, deleted since: the one of a unary append and the one of an append
    session each meet a 404 (or, while the deletion is pending, 409 ``stream_deletion_pending``), are created
    and get their rows once. In a basin with ``create_stream_on_append`` there is no 404: the append creates
    the stream itself and the task sends no create (as S2 does: ``open_for_append`` auto-creates, else
    answers 404 ``stream_not_found``, to a unary append and to a session's opening request alike)."""
    assert counting.stats is not None
    basin = fresh_basin(counting.endpoint, create_stream_on_append=on_append)
    cfg = config(counting, basin, create_streams=True, batch_max_records=1000)
    plan = WritePlan(cfg=cfg, batch_id=0, stream_column="_s2_stream")
    names = ["gone/unary"] + ["gone/session"] * 3000
    write_partition(plan, [frame([b"%d" % i for i in range(len(names))], streams=names)], ctx())

    async def delete() -> None:
        endpoints = Endpoints(account=counting.endpoint, basin=counting.endpoint)
        async with S2("test", endpoints=endpoints) as client:
            for name in ("gone/unary", "gone/session"):
                await client.basin(basin).delete_stream(name)
            while gone == "done":  # until S2 answers 404 (the deletion completes in the background)
                try:
                    await client.basin(basin).stream("gone/session").check_tail()
                except S2ServerError as exc:
                    if exc.status_code == 404:
                        break
                await asyncio.sleep(0.05)

    asyncio.run(delete())
    pools.new_process()
    found = frozenset({"gone/unary", "gone/session"})
    again = WritePlan(cfg=cfg, batch_id=1, stream_column="_s2_stream", streams_found=found)
    before = counting.stats.snapshot()
    rows = stream_rows(
        write_partition(again, [frame([b"%d" % i for i in range(len(names))], streams=names)], ctx(1))
    )
    if creates is not None:
        assert (counting.stats.snapshot() - before).requests[("control", "")] == creates
    assert (rows["gone/unary"]["records"], rows["gone/session"]["records"]) == (1, 3000)
    assert [r.body for r in read_stream(counting.endpoint, basin, "gone/unary")] == [b"0"]
    assert [int(r.body) for r in read_stream(counting.endpoint, basin, "gone/session")] == list(
        range(1, 3001)
    )
