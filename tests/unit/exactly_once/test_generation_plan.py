"""After a task retry bumped a stream's generation, the driver hands that generation to the next
micro-batches' tasks: they start the stream with it instead of the epoch's generation 0, so no task gets a
412 or reads the data stream back (the zombie check) on a failure-free batch. Block by block against the
lite server (no Spark): the real coordinator, write plans, task writer and metrics fold."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
import s2_sdk

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.fencing import TaskAttempt, Token
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin, read_all, run

TASKS = 4
ROWS = 50


def _rows(batch: int, partition: int) -> list[bytes]:
    return [b"b%d-p%d-%d" % (batch, partition, i) for i in range(ROWS)]


def _frame(bodies: list[bytes]) -> pa.RecordBatch:
    return pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})


@pytest.fixture
def data_reads(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Records each stream returned to reads (counted at the SDK's read call, beneath all of our code)."""
    counts: Counter[str] = Counter()
    real = s2_sdk.S2Stream.read

    async def counting(self: s2_sdk.S2Stream, **kw: object) -> s2_sdk.ReadBatch:
        batch = await real(self, **kw)  # type: ignore[arg-type]
        counts[self.name] += sum(1 for r in batch.records if r.headers != [(b"", b"fence")])
        return batch

    monkeypatch.setattr(s2_sdk.S2Stream, "read", counting)
    return counts


def test_batch_after_a_retry_reads_no_data_records(lite: LiteServer, data_reads: Counter[str]) -> None:
    """Batch 0: partition 0's first attempt writes half its rows and fails, its retry puts a barrier up
    (a new generation), reads back and writes the rest; the other tasks adopt the new generation. The
    driver keeps the newest token the tasks report; batch 1's tasks start with it: 0 data records read
    (before: every task's first append got a 412 and read the stream from the batch start)."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=10)
    spec = WriteSpec.build(cfg, Routing.build(stream="events", stream_column=None, shards=None))
    coord = Coordinator(cfg, "w", query_id="q", static_streams=["events"])

    epoch = coord.begin_batch(0)
    assert epoch is not None
    plan = spec.plan(0, epoch)
    write_partition(plan, [_frame(_rows(0, 0)[:25])], PartitionContext(0, 0, 0, 10, 7))  # then it fails
    results = [write_partition(plan, [_frame(_rows(0, 0))], PartitionContext(0, 0, 1, 20, 7))]
    results += [
        write_partition(plan, [_frame(_rows(0, p))], PartitionContext(0, p, 0, 10 + p, 7))
        for p in range(1, TASKS)
    ]
    metrics = aggregate(0, [r for b in results for r in b.to_pylist()], 1.0, delivery="exactly-once")
    bumped = Token.parse(metrics.stream_tokens()["events"][-1])
    assert bumped is not None
    assert (bumped.gen, bumped.by) == (1, TaskAttempt(0, 20))
    coord.commit_batch(0, metrics.end_positions())
    coord.remember_tokens(metrics.stream_tokens())  # what ExactlyOnce.commit does after the commit

    reads_in_batch_0 = data_reads["events"]
    assert reads_in_batch_0 > 0  # the retry read back, the siblings checked for a later attempt
    epoch = coord.begin_batch(1)
    assert epoch is not None
    assert epoch.tokens == {"events": str(bumped)}
    plan = spec.plan(1, epoch)
    results = [
        write_partition(plan, [_frame(_rows(1, p))], PartitionContext(1, p, 0, 30 + p, 7))
        for p in range(TASKS)
    ]
    metrics = aggregate(1, [r for b in results for r in b.to_pylist()], 1.0, delivery="exactly-once")
    coord.commit_batch(1, metrics.end_positions())
    assert data_reads["events"] == reads_in_batch_0  # batch 1 read no data records
    assert metrics.stream_tokens() == {}  # nobody had to change tokens

    written = Counter(bytes(r.body) for r in run(read_all(lite.endpoint, basin, "events")))
    assert written == Counter(b for batch in (0, 1) for p in range(TASKS) for b in _rows(batch, p))
