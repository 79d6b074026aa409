"""Spark-free pieces of the writer: metrics aggregation, routing rules, error translation."""

from __future__ import annotations

from typing import Any

import pytest

from s2_sink._write.driver.metrics import aggregate, percentile
from s2_sink._write.driver.routing import Routing
from s2_sink.errors import ConfigError, EncodeError, WriteError
from s2_sink.writer import _translate


def row(**kw: Any) -> dict[str, Any]:
    """A result row with defaults."""
    base: dict[str, Any] = {
        "partition": 0,
        "attempt": 0,
        "stream": None,
        "rows_in": 0,
        "records": 0,
        "bytes": 0,
        "appends": 0,
        "retries": 0,
        "skipped": 0,
        "dead_lettered": 0,
        "first_seq": None,
        "end_seq": None,
        "latencies_ms": None,
        "duration_ms": 1.0,
    }
    base.update(kw)
    return base


def test_aggregate_sums_tasks_and_streams() -> None:
    """Totals add up across tasks; per-stream positions take the min start and max end."""
    rows = [
        row(partition=0, rows_in=10, skipped=1),
        row(partition=1, rows_in=5, dead_lettered=2),
        row(
            partition=0,
            stream="a",
            records=6,
            bytes=60,
            appends=1,
            first_seq=10,
            end_seq=16,
            latencies_ms=[1.0],
        ),
        row(
            partition=1,
            stream="a",
            records=3,
            bytes=30,
            appends=1,
            retries=2,
            first_seq=0,
            end_seq=3,
            latencies_ms=[3.0, 5.0],
        ),
        row(
            partition=1,
            stream="dlq",
            records=2,
            bytes=20,
            appends=1,
            first_seq=0,
            end_seq=2,
            latencies_ms=[2.0],
        ),
    ]
    m = aggregate(9, rows, 2.0)
    assert (m.batch_id, m.rows_in, m.records, m.bytes, m.appends, m.retries) == (9, 15, 11, 110, 3, 2)
    assert (m.skipped, m.dead_lettered, m.partitions) == (1, 2, 2)
    assert m.streams == ("a", "dlq")
    assert m.end_positions() == {"a": 16, "dlq": 2}
    assert m.per_stream[0].first_seq == 0
    assert m.ack_latency_p50_ms == 2.0
    assert m.ack_latency_p99_ms == 5.0
    assert m.records_per_s == 5.5
    assert "s2 batch=9 rows_in=15 records=11" in m.log_line()
    assert m.as_dict()["records_per_s"] == 5.5


def test_percentile_nearest_rank() -> None:
    """Nearest-rank percentiles; None for no samples."""
    assert percentile([], 50) is None
    assert percentile([5.0], 99) == 5.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([float(i) for i in range(1, 101)], 50) == 50.0


def test_routing_rules() -> None:
    """Routing.build picks single, column, template or shards, and knows the fixed stream sets."""
    assert Routing.build(stream="s", stream_column=None, shards=None).known_streams() == ["s"]
    col = Routing.build(stream=None, stream_column="target", shards=None)
    assert (col.kind, col.source_columns(), col.body_exclusions()) == ("column", ["target"], ["target"])
    tpl = Routing.build(stream=None, stream_column="ev/{region}/{kind}", shards=None)
    assert (tpl.kind, tpl.source_columns(), tpl.body_exclusions()) == ("template", ["region", "kind"], [])
    assert tpl.known_streams() is None
    sh = Routing.build(stream="ev", stream_column=None, shards=3)
    assert sh.known_streams() == ["ev/0", "ev/1", "ev/2"]


@pytest.mark.parametrize(
    ("kw", "pattern"),
    [
        ({"stream": None, "stream_column": None, "shards": None}, "no target stream"),
        ({"stream": None, "stream_column": None, "shards": 4}, "stream prefix"),
        ({"stream": "s", "stream_column": None, "shards": True}, "shards"),
        ({"stream": "s", "stream_column": "{}", "shards": None}, "plain column names"),
        ({"stream": "s", "stream_column": "a/{b", "shards": None}, "malformed"),
    ],
)
def test_routing_errors(kw: dict[str, Any], pattern: str) -> None:
    """Impossible routing arguments are ConfigErrors that say what is wrong."""
    with pytest.raises(ConfigError, match=pattern):
        Routing.build(**kw)


def test_translate_recovers_executor_errors() -> None:
    """A Spark job failure caused by our executor-side error comes back as that error type."""
    text = "PythonException: Traceback ...\ns2_sink.errors.EncodeError: row 3 is bad\n"
    err = _translate(RuntimeError(text))
    assert isinstance(err, EncodeError)
    assert str(err) == "row 3 is bad"
    other = _translate(RuntimeError("executor lost"))
    assert isinstance(other, WriteError)
    assert "executor lost" in str(other)
