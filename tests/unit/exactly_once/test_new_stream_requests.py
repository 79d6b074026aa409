"""What the first exactly-once micro-batch of a routed writer asks S2 per stream, counted by the lite server.

A stream the task itself created (``create_streams``: answered 201, not 409) is fenced before its first
append, with a fence conditional on the empty token and on the stream holding no record, and gets no tail
check or zombie check: nothing can be on it yet. A stream someone else created is learnt from its first
append's 412, and one holding records gets the full checks."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest
from s2_sdk import AppendInput, CommandRecord, Record

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.fencing import Token
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext
from s2_sink.config import S2Config
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.faults._support import read_all, run
from tests.integration._s2read import read_streams

STREAMS = 40
OTHERS = b"another writer's record"
_ids = itertools.count(1)


@pytest.fixture(scope="module")
def counting() -> Iterator[LiteServer]:
    """A lite server of its own that counts requests by kind and stream."""
    with LiteServer(stats=True) as srv:
        yield srv


def _first_batch(counting: LiteServer, basin: str, streams: list[str]) -> dict[str, Counter[str]]:
    """One task of a new writer's first micro-batch writes two rows to each of `streams`; the requests each
    stream got, by kind (``create``: the creates the task sent, which name their stream in the body), and
    every row read back once."""
    assert counting.stats is not None
    cfg = S2Config(
        basin=basin,
        access_token="t",
        account_endpoint=counting.endpoint,
        basin_endpoint=counting.endpoint,
        create_streams=True,
    )
    spec = WriteSpec.build(cfg, Routing.build(stream=None, stream_column="target", shards=None))
    coord = Coordinator(spec.cfg, f"new-streams-{basin}", query_id=None, static_streams=spec.static_streams())
    epoch = coord.begin_batch(0, "run-1")
    assert epoch is not None
    targets = [streams[i % len(streams)] for i in range(2 * len(streams))]
    bodies = [b"row-%d" % i for i in range(len(targets))]
    batch = pa.record_batch({"_s2_body": pa.array(bodies, pa.binary()), STREAM_COLUMN: pa.array(targets)})
    before = counting.stats.snapshot()
    write_partition(spec.plan(0, epoch), [batch], PartitionContext(0, 0, 0, next(_ids), 0))
    by_stream: dict[str, Counter[str]] = {s: Counter() for s in streams}
    counted = (counting.stats.snapshot() - before).requests
    for (kind, stream), n in counted.items():
        if stream in by_stream:
            by_stream[stream][kind] += n
    # The task's other creates: its partition's sign-in register.
    creates = counted[("control", "")] - 1
    assert creates == len(streams)
    for c in by_stream.values():
        c["create"] = 1
    got: Counter[bytes] = Counter()
    for records in read_streams(counting.endpoint, basin, streams).values():
        got.update(bytes(r.body) for r in records)
    assert got - Counter([OTHERS]) == Counter(bodies)
    return by_stream


def _fences(counting: LiteServer, basin: str, stream: str) -> list[Token]:
    """The fences on `stream`, every one a token of ours."""
    records = run(read_all(counting.endpoint, basin, stream, commands=True))
    tokens = [
        Token.parse(bytes(r.body).decode()) for r in records if r.headers == [(b"", CommandRecord.FENCE)]
    ]
    assert None not in tokens
    return [t for t in tokens if t is not None]


def test_a_stream_the_task_created_costs_a_create_a_fence_and_its_append(counting: LiteServer) -> None:
    """40 streams new to S2: per stream one create, one fence (generation 0 of the run, before the first
    append) and one append of its rows; no tail check, no read (before: an append refused with 412, two
    tail checks and a read for the zombie check, the fence and the append again: seven requests)."""
    basin = fresh_basin(counting.endpoint, create_stream_on_append=False)
    streams = [f"new/{i:02d}" for i in range(STREAMS)]
    per_stream = _first_batch(counting, basin, streams)
    assert set(map(frozenset, (c.items() for c in per_stream.values()))) == {
        frozenset({("create", 1), ("append", 2)})
    }
    assert [(t.gen, t.by) for t in _fences(counting, basin, streams[0])] == [(0, None)]


def test_a_stream_created_by_someone_else_is_learnt_from_the_412_and_checked(counting: LiteServer) -> None:
    """Streams that exist before the task's create (409: not the task's): an empty one is learnt from its
    first append's 412 and fenced to generation 0 on the condition that it still holds no record (no tail
    check, no read); one holding a record (another writer's, no token) gets the full checks: its fences read
    back, and a generation named by the task."""
    basin = fresh_basin(counting.endpoint, create_stream_on_append=False)
    empty, held = "theirs/empty", "theirs/held"

    async def precreate() -> None:
        b = get_pool().client(_cfg(counting, basin)).basin(basin)
        await b.create_stream(empty)
        await b.create_stream(held)
        await b.stream(held).append(AppendInput(records=[Record(body=OTHERS)]))

    _runtime.run(precreate())
    per_stream = _first_batch(counting, basin, [empty, held])
    assert per_stream[empty] == Counter(create=1, append=3)  # create (409), 412, fence, append
    assert per_stream[held]["read"] >= 1
    [fence] = _fences(counting, basin, held)
    assert fence.gen >= 1
    assert fence.by is not None
    assert [(t.gen, t.by) for t in _fences(counting, basin, empty)] == [(0, None)]


def _cfg(counting: LiteServer, basin: str) -> S2Config:
    return S2Config(
        basin=basin,
        access_token="t",
        account_endpoint=counting.endpoint,
        basin_endpoint=counting.endpoint,
    )
