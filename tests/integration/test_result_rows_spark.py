"""A write job's result rows, collected as Arrow, are the values, Python types and key order Spark's Row
collection gives (nulls, lists empty and not, integers past 2**31, an empty result), and a task's failure
still reaches the driver as the error it raised."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from s2_sink._write.task.results import RESULT_DDL, RESULT_SCHEMA
from s2_sink.errors import FencedError
from s2_sink.writer import _collect, _translate

_ZERO = dict.fromkeys(("records", "bytes", "appends", "retries", "skipped", "dead_lettered"), 0)
_ROWS = [
    {**_ZERO, "partition": 0, "attempt": 1, "stream": None, "rows_in": 2**40, "first_seq": None,
     "end_seq": None, "latencies_ms": None, "duration_ms": 1.5, "token": None},
    {**_ZERO, "partition": 3, "attempt": 0, "stream": "s\u00e9", "rows_in": 5, "records": 5, "first_seq": 0,
     "end_seq": 2**63 - 1, "latencies_ms": [], "duration_ms": 0.0, "token": "1.0.abc"},
    {**_ZERO, "partition": 3, "attempt": 0, "stream": "", "rows_in": 0, "first_seq": None, "end_seq": 7,
     "latencies_ms": [1.25, 2.0], "duration_ms": 3.0, "token": ""},
]  # fmt: skip


def _results(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for b in batches:
        if b.num_rows:
            yield pa.RecordBatch.from_pylist(_ROWS, schema=RESULT_SCHEMA)


def _kinds(rows: list[dict[str, Any]]) -> list[list[tuple[str, str, list[str] | None]]]:
    return [
        [
            (k, type(v).__name__, [type(x).__name__ for x in v] if isinstance(v, list) else None)
            for k, v in r.items()
        ]
        for r in rows
    ]


@pytest.mark.parametrize("tasks", [0, 1, 10])
def test_result_rows_are_what_row_collection_gives(spark: SparkSession, tasks: int) -> None:
    frame = spark.range(tasks, numPartitions=max(tasks, 1)).mapInArrow(_results, RESULT_DDL)
    want = [r.asDict() for r in frame.collect()]
    got = _collect(frame)
    assert got == want
    assert _kinds(got) == _kinds(want)
    assert len(got) == 3 * tasks


def _fenced(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        raise FencedError("stream 'a': fencing token 'x' replaced this writer's token")
    yield from ()


def test_a_task_failure_reaches_the_driver_as_the_error_it_raised(spark: SparkSession) -> None:
    frame = spark.range(2, numPartitions=1).mapInArrow(_fenced, RESULT_DDL)
    with pytest.raises(Exception, match="fencing token") as info:
        _collect(frame)
    error = _translate(info.value)
    assert isinstance(error, FencedError)
    assert "replaced this writer's token" in str(error)
