"""The ordered layout benchmark's alternative step (each task ordering its encoded rows in Arrow after a
shuffle without Spark's sort) does the writer's work: from rows in any order it keeps the records the
writer's task keeps from the same rows in the order Spark's sort hands them over, so the two steps it
compares cost the same result."""

from __future__ import annotations

import random
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import LongType, StringType, StructField, StructType

from benchmarks.ordered_layout import _sorted_in_task
from s2_sink._write.driver.batch_layout import _task_frames
from s2_sink._write.driver.routing import Routing
from s2_sink._write.frame_encoding import FrameEncoding
from s2_sink.encoders import UpsertEncoder
from s2_sink.encoders._arrow_types import to_arrow_schema
from s2_sink.encoders._frame import BODY, KEY

SCHEMA = StructType(
    [StructField("id", LongType()), StructField("ts", LongType()), StructField("v", StringType())]
)
ENCODING = FrameEncoding(
    UpsertEncoder(["id"], order_by="ts", compact=True),
    SCHEMA,
    Routing.build(stream="s", stream_column=None, shards=None),
    keep=("ts",),
    arranged=False,
)


def _records(frames: Iterable[pa.RecordBatch]) -> list[tuple[bytes, bytes]]:
    return sorted((r[KEY], r[BODY]) for f in frames for r in f.to_pylist())


def test_the_task_ordered_in_arrow_keeps_what_the_writers_task_keeps() -> None:
    rng = random.Random(7)
    # Keys that repeat, changes tied on ts (told apart by their bytes), spread over batches in any order.
    rows = [{"id": rng.randrange(40), "ts": rng.randrange(6), "v": rng.choice("abc")} for _ in range(600)]
    table = pa.Table.from_pylist(rows, schema=to_arrow_schema(SCHEMA))
    spark_sorted = table.take(pc.sort_indices(table, sort_keys=[("id", "ascending"), ("ts", "ascending")]))
    kept = _records(_task_frames(ENCODING, ("ts",), False, True, spark_sorted.to_batches(max_chunksize=50)))
    assert len(kept) == len({r["id"] for r in rows})
    assert _records(_sorted_in_task(ENCODING, table.to_batches(max_chunksize=70))) == kept
