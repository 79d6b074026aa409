"""How many tasks write a micro-batch (`sizing.write_tasks`), and the options that steer it and the driver
path (``sink.write-parallelism``, ``sink.driver-write.*``)."""

from __future__ import annotations

import dataclasses
import logging
import os

import pyarrow as pa
import pytest

from s2_sink._option_map import parse_write_parallelism
from s2_sink._write.driver.metrics import BatchMetrics, aggregate
from s2_sink._write.driver.sizing import (
    BYTES_PER_TASK,
    PROBE_EVERY,
    FrameShape,
    StreamSplit,
    split_tasks,
    whole_streams,
    write_tasks,
)
from s2_sink._write.write_plan import WritePlan
from s2_sink.config import S2Config
from s2_sink.datasource._spark_writers import warn_if_fragmented
from s2_sink.datasource._write_options import parse_write_options
from s2_sink.errors import ConfigError

MIB = 1024 * 1024


def _cfg(**options: object) -> S2Config:
    return S2Config.from_options({"s2.basin": "test-basin", "s2.auth-token": "t", **options})


def test_many_small_partitions_of_unknown_size_get_two_tasks_per_core() -> None:
    """An aggregation's 200 state partitions with no size estimate are written in 2 x cores tasks."""
    assert write_tasks(FrameShape(partitions=200, size_bytes=None, cores=2), "auto") == 4
    assert write_tasks(FrameShape(partitions=200, size_bytes=None, cores=16), "auto") == 32


def test_a_known_size_sets_the_count_between_cores_and_twice_cores() -> None:
    """A known size asks for one task per 32 MiB, but never fewer than the cores (idle cores run them at
    once) nor more than two waves."""
    shape = FrameShape(partitions=256, size_bytes=10 * MIB, cores=2)
    assert write_tasks(shape, "auto") == 2
    assert write_tasks(FrameShape(256, 5 * BYTES_PER_TASK, cores=4), "auto") == 5
    assert write_tasks(FrameShape(256, 100 * BYTES_PER_TASK, cores=4), "auto") == 8
    assert write_tasks(FrameShape(256, 0, cores=1), "auto") == 1


def test_a_number_is_used_as_given() -> None:
    """``write_parallelism=n`` is n tasks whatever the shape."""
    assert write_tasks(FrameShape(partitions=200, size_bytes=None, cores=2), 7) == 7
    assert write_tasks(FrameShape(partitions=2, size_bytes=10 * BYTES_PER_TASK, cores=64), 1) == 1


@pytest.mark.parametrize(("raw", "want"), [("auto", "auto"), ("AUTO ", "auto"), ("12", 12), (3, 3)])
def test_write_parallelism_option_values(raw: object, want: object) -> None:
    """``sink.write-parallelism`` takes auto (any case) or a positive integer, as an int or its digits."""
    assert _cfg(**{"sink.write-parallelism": raw}).write_parallelism == want


@pytest.mark.parametrize("raw", ["0", 0, -2, "many", True, 1.5])
def test_bad_write_parallelism_names_the_option_and_value(raw: object) -> None:
    """A value that is neither auto nor a positive integer is a ConfigError naming option and value."""
    with pytest.raises(ConfigError, match=r"sink\.write-parallelism=.*must be auto or a positive integer"):
        _cfg(**{"sink.write-parallelism": raw})
    with pytest.raises(ConfigError, match="write_parallelism"):
        parse_write_parallelism("write_parallelism", raw)


def test_driver_write_options_and_off_switch() -> None:
    """``sink.driver-write.max-rows``/``max-bytes`` set the driver path's limits (sizes in units), 0 turns
    it off; a negative count is refused naming the option."""
    cfg = _cfg(**{"sink.driver-write.max-rows": "500", "sink.driver-write.max-bytes": "2mib"})
    assert (cfg.driver_write_max_rows, cfg.driver_write_max_bytes) == (500, 2 * MIB)
    assert _cfg().driver_write_max_rows == 10_000
    assert _cfg().driver_write_max_bytes == 8 * MIB
    assert _cfg(**{"sink.driver-write.max-rows": 0}).driver_write_max_rows == 0
    with pytest.raises(ConfigError, match=r"driver_write_max_rows \(sink\.driver-write\.max-rows\)"):
        _cfg(**{"sink.driver-write.max-rows": "-1"})


def _metrics(records: int, nbytes: int) -> BatchMetrics:
    m = aggregate(7, [], 0.1)
    return dataclasses.replace(m, records=records, bytes=nbytes)


def test_format_s2_warns_once_per_query_about_a_fragmented_batch(caplog: pytest.LogCaptureFixture) -> None:
    """A format('s2') batch in far more partitions than cores, under 1 MiB each, logs one WARNING naming
    coalesce; the same query's next batch does not repeat it; a batch whose partitions are big enough, or
    few, does not warn."""
    caplog.set_level(logging.WARNING, logger="s2_sink")
    many = 4 * (os.cpu_count() or 1) + 1
    assert not warn_if_fragmented("q-few", 2, _metrics(600, 60_000))
    assert not warn_if_fragmented("q-big", many, _metrics(10**6, many * 2 * MIB))
    assert caplog.text == ""
    assert warn_if_fragmented("q-small", many, _metrics(600, 60_000))
    assert "coalesce(n)" in caplog.text
    assert f"{many} partitions" in caplog.text
    assert not warn_if_fragmented("q-small", many, _metrics(600, 60_000))
    assert caplog.text.count("coalesce(n)") == 1


@pytest.mark.parametrize("key", ["sink.write-parallelism", "SINK.driver-write.max-rows"])
def test_format_s2_refuses_the_foreach_batch_layout_options(key: str) -> None:
    """format('s2') keeps Spark's partitioning: the options that size S2Writer's tasks are refused, naming
    the option and the coalesce fix, rather than silently ignored."""
    with pytest.raises(ConfigError, match=r"foreachBatch\(S2Writer.*df\.coalesce\(n\)"):
        parse_write_options({key: "4"}, cfg=_cfg(**{"s2.stream": "s"}), streaming=True)


def _result_rows(tasks: int, streams: int, rows: int, *, split: bool = False) -> list[dict[str, object]]:
    """Task result rows of a batch whose `tasks` tasks each appended to all `streams` streams (`split`: each
    stream's records in one task, the streams dealt round the tasks)."""
    out: list[dict[str, object]] = []
    for p in range(tasks):
        out.append({"partition": p, "stream": None, "rows_in": rows // tasks})
        if split:
            names = range(p, streams, tasks)
            out.extend({"partition": p, "stream": f"s{i}", "records": rows // streams} for i in names)
        else:
            out.extend(
                {"partition": p, "stream": f"s{i}", "records": rows // streams // tasks}
                for i in range(streams)
            )
    return out


def test_a_routed_writer_starts_split_by_stream_and_narrows_when_few_streams_hold_many_rows() -> None:
    """The first batch goes by stream (each new stream created and appended to by one task). Split, 1,000
    streams of 100 records over 2 tasks could cost 1,000 extra (task, stream) pairs narrowed: the next batches
    stay split; 4 streams of 25,000 records could cost 4: the next batch is narrowed, and stays so while the
    narrowed tasks do not share their streams widely."""
    split = StreamSplit()
    assert split.next_by_stream()
    split.observe(_result_rows(2, 1000, 100_000, split=True), 100_000, by_stream=True)
    assert split.next_by_stream()
    split.observe(_result_rows(2, 4, 100_000, split=True), 100_000, by_stream=True)
    assert not split.next_by_stream()
    split.observe(_result_rows(2, 4, 100_000), 100_000, by_stream=False)
    assert not split.next_by_stream()


def test_batches_whose_tasks_share_many_streams_are_split_by_stream_until_the_next_probe() -> None:
    """Two tasks sharing 1,000 streams over 100,000 rows: the next batches go by stream; a batch split so
    keeps it; every PROBE_EVERY-th batch is narrowed again to see. One stream shared by two tasks, or
    streams the tasks do not share, never pay the shuffle."""
    split = StreamSplit(by_stream=False)
    assert not split.next_by_stream()
    split.observe(_result_rows(2, 1, 100_000), 100_000, by_stream=False)
    assert not split.next_by_stream()
    split.observe(_result_rows(2, 1000, 100_000), 100_000, by_stream=False)
    taken = []
    for _ in range(PROBE_EVERY + 1):
        taken.append(split.next_by_stream())
        if taken[-1]:
            split.observe(_result_rows(2, 1000, 100_000, split=True), 100_000, by_stream=True)
    assert taken == [True] * PROBE_EVERY + [False]
    apart = [{"stream": None, "rows_in": 50_000}, *({"stream": f"a{i}"} for i in range(500))]
    apart += [{"stream": None, "rows_in": 50_000}, *({"stream": f"b{i}"} for i in range(500))]
    split.observe(apart, 100_000, by_stream=False)
    assert not split.next_by_stream()


def test_the_first_split_orders_rows_by_stream_and_a_written_batch_decides_after() -> None:
    """Before any batch was written, how much a task's rows weigh is unknown: the first split orders them
    by stream (and tells the tasks); a split batch whose tasks' rows fit the open chunks is not sorted
    next."""
    split = StreamSplit(held_bytes=16 * 1024 * 1024)
    plan = WritePlan(cfg=_cfg(), batch_id=0, stream_column="tenant")
    assert split.grouped
    assert split.tasks_plan(plan).rows_by_stream
    split.observe(_result_rows(2, 1000, 100_000, split=True), 100_000, by_stream=True)  # no bytes: fits
    assert split.next_by_stream()
    assert not split.grouped
    assert not split.tasks_plan(plan).rows_by_stream


def test_a_split_orders_each_tasks_rows_by_stream_only_when_they_outweigh_the_held_bytes() -> None:
    """Streams interleaved in a task whose rows outweigh what its open chunks may hold would each be sent in
    several small appends (the fullest shed early): such a batch's split also orders each task's rows by
    stream, and its tasks are told so (`WritePlan.rows_by_stream`). A split that fits, or a narrowed batch
    that stays narrowed, is not sorted."""

    def rows(tasks: int, streams: int, stream_bytes: int) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for p in range(tasks):
            out.append({"partition": p, "stream": None, "rows_in": 100 * streams})
            out.extend({"partition": p, "stream": f"s{i}", "bytes": stream_bytes} for i in range(streams))
        return out

    split = StreamSplit(held_bytes=16 * 1024 * 1024)
    split.observe(rows(2, 1000, 7_500), 200_000, by_stream=False)  # 7.5 MB a task: fits
    assert (split.by_stream, split.grouped) == (True, False)
    plan = WritePlan(cfg=_cfg(), batch_id=0, stream_column="tenant")
    assert not split.tasks_plan(plan).rows_by_stream
    split.observe(rows(2, 10_000, 7_500), 2_000_000, by_stream=False)  # 75 MB a task
    assert (split.by_stream, split.grouped) == (True, True)
    assert split.tasks_plan(plan).rows_by_stream  # sorted: the tasks are told so
    split.observe(rows(2, 1, 75_000_000), 2_000_000, by_stream=False)  # one stream: never split
    assert (split.by_stream, split.grouped) == (False, False)


def test_a_split_by_stream_runs_one_task_per_core_unless_told_otherwise() -> None:
    """A split by stream spreads many streams evenly whatever the task count: one wave of tasks, one per
    core, however big the batch (a second wave only repeats each task's floor); a set parallelism is kept."""
    big = FrameShape(partitions=None, size_bytes=100 * BYTES_PER_TASK, cores=2)
    assert write_tasks(big, "auto") == 4
    assert split_tasks(big, "auto") == 2
    assert split_tasks(FrameShape(partitions=None, size_bytes=None, cores=3), "auto") == 3
    assert split_tasks(big, 7) == 7


def test_a_grouped_split_sizes_its_partitions_by_the_last_batch_or_this_ones_estimate() -> None:
    """Each shuffle partition holds about half of what a task's open chunks may: sized by the larger of the
    last batch's task bytes and this batch's share of the optimizer's estimate, so a batch that outgrew the
    last one (a backlog) does not send each of its streams in pieces; 8 per task before any batch."""
    split = StreamSplit(held_bytes=16 * 1024 * 1024)
    assert split.groups(2, None) == 8
    assert split.groups(2, 2 * 64 * 1024 * 1024) == 8  # 64 MiB a task: 8 partitions of 8 MiB
    assert split.groups(2, 2 * 256 * 1024 * 1024) == 32
    assert split.groups(2, 1024) == 8  # the estimate is of the input, not the records: it only raises
    split.task_bytes = 32 * 1024 * 1024
    assert split.groups(2, None) == 4
    assert split.groups(2, 2 * 128 * 1024 * 1024) == 16  # the batch outgrew the last one: its estimate
    assert split.groups(2, 1024) == 4  # a smaller estimate: the last batch's bytes
    assert split.groups(2, 1 << 40) == 64  # bounded


def _tagged(parts: list[int], ids: list[int]) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(ids, pa.int64()), "_s2_split_part": pa.array(parts, pa.int32())})


def test_a_grouped_split_task_gets_each_shuffle_partition_as_one_batch_in_order() -> None:
    """Spark's Arrow batches cut across the shuffle partitions a task reads one after another: the task
    gets one batch per partition, its rows in order, without the partition column; a partition over the
    byte cap comes in pieces, still in order."""
    batches = [_tagged([3, 3, 3], [0, 1, 2]), _tagged([3, 5, 5, 0], [3, 4, 5, 6]), _tagged([0, 0], [7, 8])]
    got = list(whole_streams(iter(batches), 1 << 30))
    assert [b.schema.names for b in got] == [["id"]] * 3
    assert [b.column("id").to_pylist() for b in got] == [[0, 1, 2, 3], [4, 5], [6, 7, 8]]
    pieces = list(whole_streams(iter(batches), 1))  # every piece is over the cap: handed on as it comes
    assert [b.column("id").to_pylist() for b in pieces] == [[0, 1, 2], [3], [4, 5], [6], [7, 8]]
