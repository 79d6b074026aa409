"""Recovery of an upsert micro-batch with ``order_by`` a dead run partly wrote, block by block against the
lite server (no Spark): the replay places every change of a key in one task (by stream and ``@key``, a part
of what the fingerprint covers), writes them in change order, and subtracts the dead run's prefix once."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import IntegerType, StringType, StructField, StructType

from s2_sink._exactly_once.epoch_plan import epoch_plan, plan_with_layout
from s2_sink._exactly_once.fencing import writer_hash
from s2_sink._exactly_once.recovery_layout import RecoveryLayout, content_hash
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.dead_letters import row_hash
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.encoders import BODY, HEADERS, KEY, UpsertEncoder
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin, read_all, run

SCHEMA = StructType(
    [StructField("k", StringType()), StructField("v", IntegerType()), StructField("pos", IntegerType())]
)
ENCODER = UpsertEncoder(["k"], order_by="pos", exclude_columns=["pos"])
KEYS = [f"key-{i}" for i in range(8)]
# Six changes per key; bodies repeat within a key and across keys, so identical records are many.
ROWS = [{"k": k, "v": pos % 2, "pos": pos} for pos in range(6) for k in KEYS]


def _plan(cfg: S2Config, epoch: int, *, recovery: bool) -> WritePlan:
    spec = WriteSpec.build(cfg, Routing.build(stream="cdc", stream_column=None, shards=None))
    return spec.plan(0, epoch_plan(cfg, writer_hash("w"), epoch, {}, recovery=recovery, writer_id="w"))


def _frame(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """What a task writes: its rows' changes, in change order (the writer sorted them)."""
    return ENCODER.encode_arrow(
        pa.RecordBatch.from_pylist(rows, schema=to_arrow_schema(SCHEMA)), schema=SCHEMA
    )


def _record(frame: pa.RecordBatch, i: int) -> tuple[list[tuple[bytes, bytes]], bytes]:
    row = frame.slice(i, 1).to_pylist()[0]
    return [(h["name"], h["value"]) for h in row[HEADERS]], row[BODY]


def _per_key(endpoint: str, basin: str) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = defaultdict(list)
    for rec in run(read_all(endpoint, basin, "cdc")):
        headers = {bytes(n): bytes(v) for n, v in rec.headers}
        out[headers[b"@key"]].append(bytes(rec.body))
    return dict(out)


def test_layout_places_a_keys_changes_together_and_its_dead_letters_with_them() -> None:
    """Changes of one key with different bodies share a partition (whole-content hashing would spread them),
    and a bad row's dead-letter hash names the partition that holds the row."""
    layout = RecoveryLayout(partitions=8, routed=False, keys=tuple(range(8)))
    frame = _frame([r for r in ROWS if r["k"] == "key-3"])
    records = [_record(frame, i) for i in range(len(frame))]
    assert len({layout.partition_of("cdc", h, b) for h, b in records}) == 1
    assert len({layout.partition_of_hash(content_hash(None, h, b)) for h, b in records}) > 1
    spec = WriteSpec.build(
        cfg_for("http://127.0.0.1:9", "no-server-basin", stream="cdc"),
        Routing.build(stream="cdc", stream_column=None, shards=None),
        on_error="dlq",
        dlq_stream="dlq",
    )
    plan = spec.plan(0, epoch_plan(spec.cfg, writer_hash("w"), 1, {}, recovery=True, writer_id="w"))
    for i, (headers, body) in enumerate(records):
        assert layout.partition_of_hash(row_hash(plan, frame, i)) == layout.partition_of("cdc", headers, body)


def test_replay_writes_each_keys_changes_once_in_change_order(lite: LiteServer) -> None:
    """The dead run (laid out by key parity, two tasks) wrote the first four changes of the even keys and
    died; the replay, laid out by the recovery layout over three tasks, subtracts that prefix and writes
    the rest after it: every key's stream is its six changes in pos order, each once."""
    basin = make_basin(lite.endpoint, ["cdc"])
    cfg = cfg_for(lite.endpoint, basin, stream="cdc", batch_max_records=3)
    dead = _plan(cfg, 1, recovery=False)
    prefix = [r for r in ROWS if KEYS.index(r["k"]) % 2 == 0 and r["pos"] < 4]
    write_partition(dead, [_frame(prefix)], PartitionContext(0, 0, 0, 0, 0))

    layout = RecoveryLayout(partitions=3, routed=False)
    by_task: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in reversed(ROWS):  # the input order does not matter: each task sorts by change order
        frame = _frame([row])
        by_task[layout.partition_of("cdc", *_record(frame, 0))].append(row)
    assert len(by_task) > 1  # really several tasks
    replay = plan_with_layout(_plan(cfg, 2, recovery=True), layout)
    for task in range(3):
        write_partition(replay, [_frame(by_task[task])], PartitionContext(0, task, 0, 0, 0))

    expected = {f'{{"k":"{k}"}}'.encode(): [f'{{"v":{pos % 2}}}'.encode() for pos in range(6)] for k in KEYS}
    assert _per_key(lite.endpoint, basin) == expected


def test_frame_key_is_the_key_header() -> None:
    """The recovery layout's Spark expression hashes the first header's value, which is the frame's key."""
    frame = _frame(ROWS[:3])
    for i in range(3):
        headers, _ = _record(frame, i)
        assert headers[0] == (b"@key", frame.column(KEY)[i].as_py())
