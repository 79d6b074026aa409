"""Where an ordered changelog's client CPU goes in Spark, without a server: the benchmark's cached ``events``
rows through each step of ``UpsertEncoder(["id"], order_by="ts", compact=True)``'s layout, every stage ending
in a ``mapInArrow`` that only counts its rows (the last three encode them too, the first two of those
compact), best of three.

    python -m benchmarks.ordered_layout [--rows 400000]

Steps: the rows turned into Arrow; + a shuffle by ``id``; + the sort by ``(id, ts)``; the same sort led by
``xxhash64(id)``; the writer's layout (`batch_layout.laid_out`) with its tasks' encoding, tie order and
compaction; the same shuffle with each task ordering its encoded rows in Arrow instead of Spark's sort
(``sort_indices`` by key, ``ts`` and record bytes, then compacted: the alternative the writer does not take,
measured beside it); the plain encoding, no layout (what the unordered upsert does before it appends).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks._data import shape
from benchmarks._procs import ProcessMeter
from s2_sink import S2Config, S2Writer
from s2_sink._write.driver.batch_layout import laid_out
from s2_sink._write.frame_encoding import FrameEncoding
from s2_sink.encoders import UpsertEncoder
from s2_sink.encoders._change_order import last_changes
from s2_sink.encoders._frame import ACTION, BODY, KEY

__all__ = ["main"]

Frames = Callable[[Iterable[pa.RecordBatch]], Iterable[pa.RecordBatch]]


def _count(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    yield pa.record_batch({"n": pa.array([sum(b.num_rows for b in batches)], pa.int64())})


def _count_after(tail: Frames, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    return _count(tail(batches))


def _sorted_in_task(encoding: FrameEncoding, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's rows encoded as they come, then all of them put in change order in Arrow and compacted."""
    frames = list(encoding.frames(batches))
    if not frames:
        return iter(())
    whole = pa.Table.from_batches(frames).combine_chunks()
    order = pc.sort_indices(whole, sort_keys=[(c, "ascending") for c in (KEY, "ts", BODY, ACTION)])
    return last_changes(whole.take(order).to_batches(), routed=False)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=400_000)
    args = p.parse_args()
    os.environ["PYSPARK_PYTHON"] = sys.executable

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = shape(spark.range(0, args.rows, numPartitions=2)).cache()
    df.count()
    meter = ProcessMeter(spark.sparkContext._gateway.proc.pid, None)  # type: ignore[union-attr]
    cfg = S2Config(basin="bench-basin", stream="s", access_token="unused")
    writer = S2Writer(cfg, UpsertEncoder(["id"], order_by="ts", compact=True))
    rows, encoding = writer.rows(df)
    laid = laid_out(rows, encoding, tasks=2, by_key=True)
    assert laid.tail is not None  # an ordered changelog's tasks encode
    shuffled = rows.repartition(2, "id")
    steps: list[tuple[str, DataFrame, Frames]] = [
        ("rows -> Arrow", rows, _count),
        ("+ shuffle by id", shuffled, _count),
        ("+ sort by (id, ts)", shuffled.sortWithinPartitions("id", "ts"), _count),
        (
            "+ sort by (xxhash64(id), id, ts)",
            shuffled.sortWithinPartitions(F.xxhash64("id"), "id", "ts"),
            _count,
        ),
        (
            "the layout, encoded, tie-ordered, compacted",
            laid.frame,
            functools.partial(_count_after, laid.tail),
        ),
        (
            "+ shuffle, ordered in Arrow in the task",
            shuffled,
            functools.partial(_count_after, functools.partial(_sorted_in_task, encoding)),
        ),
        ("no layout, encoded", rows, functools.partial(_count_after, encoding.frames)),
    ]
    print("step                                          Python us/rec  JVM us/rec  wall s")
    for name, frame, fn in steps:
        best = None
        for _ in range(3):
            meter.start()
            frame.mapInArrow(fn, "n long").collect()
            usage = meter.stop()
            if best is None or usage.jvm_cpu_s + usage.worker_cpu_s < best.jvm_cpu_s + best.worker_cpu_s:
                best = usage
        assert best is not None
        python = (best.worker_cpu_s + best.driver_cpu_s) / args.rows * 1e6
        print(
            f"{name:46s}{python:14.2f}{best.jvm_cpu_s / args.rows * 1e6:12.2f}{best.wall_s:8.2f}", flush=True
        )


if __name__ == "__main__":
    main()
