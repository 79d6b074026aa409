"""The last commit's stream ends travel by reference once there are many (`ends_cache`), against a lite
server that counts what it serves: the plan stays small, and a task that needs a stream's end (a retry's
read-back) looks it up in the ledger and reads back from there, not from the stream's start."""

from __future__ import annotations

import itertools
import pickle
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest

from s2_sink._exactly_once import ends_cache
from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.faults._support import read_all, run

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
