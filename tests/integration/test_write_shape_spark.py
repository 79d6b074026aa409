"""What Spark's shapes cost S2Writer, on classic local[2] Spark against the lite server: many small
partitions are written in a few tasks, ordered upserts keep each key's order in a resized layout, and a
small micro-batch is written from the driver process, exactly once, through a failed attempt and a dead
run's replay."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from pyspark import TaskContext
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from s2_sink import S2Writer
from s2_sink._exactly_once.identity import session_facts
from s2_sink._write.driver.driver_write import collect_arrow, probe_small, write_on_driver
from s2_sink._write.driver.routing import STREAM_COLUMN
from s2_sink._write.driver.sizing import FrameShape, StreamSplit, size_estimate
from s2_sink.config import ONE_MIB
from s2_sink.errors import ConfigError
from s2_sink.lite import LiteServer
from tests.integration._eo_batches import new_driver_process
from tests.integration.test_upsert_order_spark import CHANGES, _encoder, _expected, _per_key, _split
from tests.integration.test_writer_spark import bodies, cfg_for, rows_df

pytestmark = pytest.mark.spark

TASK_PATH: dict[str, Any] = {"driver_write_max_rows": 0}
"""Config overrides that keep a batch on the task path however small it is."""


def _ids(lite: LiteServer, basin: str, stream: str = "events") -> list[int]:
    return [b["id"] for b in bodies(lite, basin, stream)]


def test_256_small_partitions_are_written_in_few_tasks_exactly_once(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """20k rows in 256 partitions are written by at most 2 x cores tasks (coalesced, no shuffle), each row
    once; with write_parallelism=12 the same rows take 12 tasks (the sizing decided the count)."""
    cfg = cfg_for(lite, basin, create_streams=True, **TASK_PATH)
    writer = S2Writer(cfg, writer_id="many-partitions")
    df = rows_df(spark, 20_000, partitions=256)
    writer(df, 0)
    m = writer.last_metrics
    assert m is not None
    assert (m.path, m.records) == ("tasks", 20_000)
    assert 1 <= m.partitions <= 2 * spark.sparkContext.defaultParallelism, m.partitions
    assert sorted(_ids(lite, basin)) == list(range(20_000))

    # The control: told to, the writer keeps more tasks (here 12 of the 256 partitions, coalesced).
    wide = S2Writer(cfg.replace(stream="wide"), writer_id="wide", write_parallelism=12)
    wide(df, 0)
    assert wide.last_metrics is not None
    assert wide.last_metrics.partitions == 12


@pytest.mark.parametrize("parallelism", [1, 3])
def test_ordered_upsert_keeps_each_keys_order_when_resized(
    spark: SparkSession, lite: LiteServer, basin: str, parallelism: int
) -> None:
    """Upsert changes with order_by over 16 input partitions, written by `parallelism` tasks laid out by
    key: each key's stream has its changes in pos order, each once."""
    stream = f"resized-{parallelism}"
    cfg = cfg_for(lite, basin, stream=stream, batch_max_records=5, **TASK_PATH)
    writer = S2Writer(cfg, _encoder(), writer_id=stream, write_parallelism=parallelism)
    writer(_split(spark, CHANGES, 4, 16), 0)
    assert writer.last_metrics is not None
    assert writer.last_metrics.partitions == parallelism
    assert _per_key(lite, basin, stream) == _expected(CHANGES)


def test_an_ordered_upsert_is_laid_out_in_one_task_per_core(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """An ordered changelog is shuffled by key whatever its size: `auto` writes it in one task per core
    (a frame of unknown size, narrowed, would get two per core), each key's changes in pos order."""
    cfg = cfg_for(lite, basin, stream="per-core", batch_max_records=5, **TASK_PATH)
    writer = S2Writer(cfg, _encoder(), writer_id="per-core")
    writer(_split(spark, CHANGES, 5, 16), 0)
    assert writer.last_metrics is not None
    assert writer.last_metrics.partitions == spark.sparkContext.defaultParallelism
    assert _per_key(lite, basin, "per-core") == _expected(CHANGES)


def test_small_ordered_upsert_from_the_driver_keeps_each_keys_order(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """The same changes under the default limits are small: written from the driver, in pos order."""
    writer = S2Writer(cfg_for(lite, basin, stream="cdc", batch_max_records=5), _encoder(), writer_id="cdc")
    writer(_split(spark, CHANGES, 5, 7), 0)
    assert writer.last_metrics is not None
    assert writer.last_metrics.path == "driver"
    assert _per_key(lite, basin, "cdc") == _expected(CHANGES)


def test_small_batch_is_written_from_the_driver_exactly_once(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """A 1k-row micro-batch in 8 partitions is written from the driver (metrics say path=driver, one
    partition); a restarted driver's writer called with the same batch id writes nothing (the same writer
    called again, outside a streaming query's run, is refused: a second call cannot be told from a
    restart); a batch over driver_write_max_rows goes to the tasks."""
    cfg = cfg_for(lite, basin, create_streams=True, driver_write_max_rows=1000)
    writer = S2Writer(cfg, writer_id="small")
    writer(rows_df(spark, 1000, partitions=8), 0)
    m = writer.last_metrics
    assert m is not None
    assert (m.path, m.partitions, m.records) == ("driver", 1, 1000)
    assert "path=driver" in m.log_line()
    with pytest.raises(ConfigError, match="called again for micro-batch 0"):
        writer(rows_df(spark, 1000, partitions=8), 0)
    new_driver_process()
    writer = S2Writer(cfg, writer_id="small")
    writer(rows_df(spark, 1000, partitions=8), 0)
    assert writer.last_metrics is not None
    assert writer.last_metrics.replay_skipped
    writer(rows_df(spark, 1001, partitions=8).filter("id >= 1000"), 1)
    assert writer.last_metrics is not None
    assert writer.last_metrics.path == "driver"
    writer(rows_df(spark, 3002, partitions=8).filter("id >= 1001"), 2)  # 2001 rows: over the limit
    assert writer.last_metrics is not None
    assert writer.last_metrics.path == "tasks"
    assert sorted(_ids(lite, basin)) == list(range(3002))


def test_a_failed_driver_attempt_is_retried_as_a_retry(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """The connection drops after an append was applied but before its ack: the driver's attempt 0 fails
    (exactly-once never re-sends a possibly-applied append), attempt 1 signs in after it, fences, reads
    back what attempt 0 wrote and writes only the rest: every row once."""
    cfg = cfg_for(lite, basin, create_streams=True, batch_max_records=50)
    writer = S2Writer(cfg, writer_id="driver-retry")
    writer(rows_df(spark, 10, partitions=1), 0)  # streams, ledger and roll call exist
    lite.faults.drop_connections(after_appends=4, ambiguous=True)
    try:
        writer(rows_df(spark, 1010, partitions=4).filter("id >= 10"), 1)
    finally:
        lite.faults.clear()
    assert writer.last_metrics is not None
    assert writer.last_metrics.path == "driver"
    ids = _ids(lite, basin)
    assert sorted(ids) == list(range(1010)), f"{len(ids) - len(set(ids))} duplicates"


def test_a_dead_runs_small_batch_is_replayed_from_the_driver_exactly_once(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """A run wrote half of a small batch from its driver and died before the ledger commit; the restarted
    writer replays the batch (split differently) as a recovery laid out in one partition, from its
    driver, and subtracts what the dead run wrote: every row once."""
    cfg = cfg_for(lite, basin, create_streams=True, batch_max_records=20)
    dead = S2Writer(cfg, writer_id="dead-driver")
    rows, encoding = dead.rows(rows_df(spark, 600, partitions=3))
    job = dead.mode.prepare(0, session_facts(spark))
    assert job is not None
    dead._create_known_streams()
    half = collect_arrow(rows.coalesce(1)).slice(0, 300)
    write_on_driver(job, encoding, pa.Table.from_batches(half.to_batches()))  # the driver dies: no commit
    assert len(_ids(lite, basin)) == 300

    new_driver_process()
    replay = S2Writer(cfg, writer_id="dead-driver")
    replay(rows_df(spark, 600, partitions=5), 0)
    assert replay.last_metrics is not None
    assert replay.last_metrics.path == "driver"
    ids = _ids(lite, basin)
    assert sorted(ids) == list(range(600)), f"{len(ids) - len(set(ids))} duplicates"


def test_a_batch_the_optimizer_sizes_far_over_the_byte_limit_is_not_probed(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """The optimizer's size estimate of a record frame is read (py4j hands ``sizeInBytes`` over as a Python
    int): a cached 20k-row batch has one, and with the driver-write byte limit far below it the batch goes
    to the tasks without the probe job (no collect). Read wrongly, every batch of any size was
    persisted and probed first (the 2M-row benchmark paid ~30% more JVM CPU for it)."""
    df = rows_df(spark, 20_000).cache()
    try:
        df.count()
        writer = S2Writer(cfg_for(lite, basin, driver_write_max_bytes=4096), writer_id="sized")
        rows, _ = writer.rows(df)
        size = size_estimate(rows)
        assert size is not None
        assert size > 20_000, size
        jobs_before = _jobs(spark)
        with probe_small(rows, writer.cfg, size) as small:
            assert small is None
        assert _jobs(spark) == jobs_before
    finally:
        df.unpersist()


def test_a_batch_after_a_big_one_skips_the_probe_until_one_is_small(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """A query's batches tend to stay big or small: after a batch over driver_write_max_rows the next one
    goes to the tasks without the probe's Spark job (however small it is), and after a small one the probe
    runs again and sends the small batch to the driver; every row once."""
    cfg = cfg_for(lite, basin, create_streams=True, driver_write_max_rows=1000)
    writer = S2Writer(cfg, writer_id="sticky")
    paths = []
    for batch_id, (lo, hi) in enumerate([(0, 2000), (2000, 2010), (2010, 2020), (2020, 2030)]):
        jobs_before = _jobs(spark)
        writer(rows_df(spark, hi, partitions=4).filter(f"id >= {lo}"), batch_id)
        assert writer.last_metrics is not None
        paths.append((writer.last_metrics.path, _jobs(spark) - jobs_before))
    # big (probe + write), small but after a big one (the write job only), then the driver (the probe only)
    assert paths == [("tasks", 2), ("tasks", 1), ("driver", 1), ("driver", 1)], paths
    assert sorted(_ids(lite, basin)) == list(range(2030))


def _jobs(spark: SparkSession) -> int:
    """Spark jobs started so far in this thread's job group (none: every job of the test)."""
    tracker = spark.sparkContext.statusTracker()
    return len(tracker.getJobIdsForGroup(spark.sparkContext.getLocalProperty("spark.jobGroup.id")))


def test_a_known_size_sizes_the_write_stage(spark: SparkSession, lite: LiteServer, basin: str) -> None:
    """The optimizer knows a cached frame's size: 20k cached rows (about 2 MiB) in 256 partitions are far
    below 32 MiB a task, so they are written by one task per core (an unknown size would get two)."""
    df = rows_df(spark, 20_000, partitions=256).cache()
    try:
        df.count()
        assert 0 < (size_estimate(df) or 0) < 32 * 1024 * 1024
        writer = S2Writer(cfg_for(lite, basin, create_streams=True, **TASK_PATH), writer_id="known-size")
        writer(df, 0)
    finally:
        df.unpersist()
    assert writer.last_metrics is not None
    assert writer.last_metrics.partitions == spark.sparkContext.defaultParallelism
    assert sorted(_ids(lite, basin)) == list(range(20_000))


def test_a_small_batch_with_a_null_struct_over_non_null_fields_is_written_from_the_driver(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """``when(c, struct(...))`` makes a nullable struct of non-null fields; collecting such rows as Arrow
    casts them to that schema, which refuses the null structs. The driver's probe relaxes the nested
    fields first: the small batch is written from the driver, with the bodies the task path writes."""
    from pyspark.sql import functions as F

    df = spark.range(40).select(
        "id",
        F.when(
            F.col("id") % 10 != 3,
            F.struct(
                (F.col("id") % 10).alias("x"), F.concat(F.lit("s"), F.col("id").cast("string")).alias("y")
            ),
        ).alias("st"),
    )
    assert not df.schema["st"].dataType.fields[1].nullable
    got = {}
    for path, extra in (("driver", {}), ("tasks", TASK_PATH)):
        cfg = cfg_for(lite, basin, stream=f"nested-{path}", create_streams=True, **extra)
        writer = S2Writer(cfg, delivery="at-least-once")
        writer(df, 0)
        assert writer.last_metrics is not None
        assert writer.last_metrics.path == path
        got[path] = sorted(bodies(lite, basin, f"nested-{path}"), key=lambda b: b["id"])
    assert got["driver"] == got["tasks"]
    assert got["driver"][3] == {"id": 3, "st": None}
    assert got["driver"][4] == {"id": 4, "st": {"x": 4, "y": "s4"}}


def test_batches_spread_over_many_streams_are_split_by_stream_exactly_once(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """Rows routed to 200 streams, spread over both input partitions: every batch, the first too, goes by
    target stream (each stream's rows in one task: 200 appends, not 400 with every task appending to every
    stream); every stream holds each of its rows once per batch, in order per input partition."""
    cfg = cfg_for(lite, basin, create_streams=True, stream=None, **TASK_PATH)
    writer = S2Writer(cfg, stream_column="tenant", writer_id="spread")
    df = rows_df(spark, 4_000).withColumn(
        "tenant", F.concat(F.lit("t/"), F.lpad((F.col("id") % 200).cast("string"), 3, "0"))
    )
    appends = []
    for batch in range(3):
        writer(df, batch)
        m = writer.last_metrics
        assert m is not None
        assert (m.records, len(m.streams)) == (4_000, 200)
        appends.append(m.appends)
    assert appends == [200, 200, 200]
    for s in (0, 7, 199):
        ids = _ids(lite, basin, f"t/{s:03d}")
        assert sorted(ids) == sorted(list(range(s, 4_000, 200)) * 3)
        for batch in range(3):  # each input partition's rows (ids below 2,000, and the rest) in order
            written = ids[20 * batch : 20 * (batch + 1)]
            for part in ([i for i in written if i < 2_000], [i for i in written if i >= 2_000]):
                assert part == sorted(part)


def test_a_split_batch_of_few_streams_makes_the_next_ones_narrowed(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """Rows routed to 2 streams of 1,000 rows each (one append's worth): the first batch goes by stream
    (2 appends), and shows that narrowing costs at most 2 more appends, far less than a shuffle of 2,000
    rows: the next batches are narrowed (each task appends to both streams: 4 appends), every row once, in
    order per input partition."""
    cfg = cfg_for(lite, basin, create_streams=True, stream=None, **TASK_PATH)
    writer = S2Writer(cfg, stream_column="tenant", writer_id="few")
    df = rows_df(spark, 2_000).withColumn("tenant", F.concat(F.lit("f/"), (F.col("id") % 2).cast("string")))
    appends = []
    for batch in range(3):
        writer(df, batch)
        m = writer.last_metrics
        assert m is not None
        assert (m.records, len(m.streams)) == (2_000, 2)
        appends.append(m.appends)
    assert appends == [2, 4, 4]
    for s in (0, 1):
        ids = _ids(lite, basin, f"f/{s}")
        assert sorted(ids) == sorted(list(range(s, 2_000, 2)) * 3)
        for batch in range(3):
            written = ids[1_000 * batch : 1_000 * (batch + 1)]
            for part in ([i for i in written if i < 1_000], [i for i in written if i >= 1_000]):
                assert part == sorted(part)


def test_a_split_over_the_open_chunk_cap_sends_each_stream_once_in_row_order(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """Rows routed to 100 streams, each task's share over what its open chunks may hold (1 MiB): a split by
    stream hands a task its streams interleaved, and shedding the fullest chunks early would send each stream
    in several appends; the split orders each task's rows by stream, so each stream goes in one append, each
    input partition's rows in order, every row once."""
    # 200 rows per stream: below the split's threshold (`ROWS_PER_SESSION`), so the batch is split.
    rows, streams = 20_000, 100
    cfg = cfg_for(lite, basin, create_streams=True, stream=None, max_inflight_bytes=ONE_MIB, **TASK_PATH)
    writer = S2Writer(cfg, stream_column="tenant", writer_id="grouped")
    df = (
        rows_df(spark, rows)
        .withColumn("tenant", F.concat(F.lit("g/"), F.lpad((F.col("id") % streams).cast("string"), 3, "0")))
        .withColumn("pad", F.lit("x" * 160))
    )
    appends = []
    for batch in range(3):
        writer(df, batch)
        m = writer.last_metrics
        assert m is not None
        assert (m.records, len(m.streams)) == (rows, streams)
        appends.append(m.appends)
    assert appends == [streams, streams, streams]
    per_stream = rows // streams
    for s in (0, 42, 99):
        ids = _ids(lite, basin, f"g/{s:03d}")
        assert sorted(ids) == sorted(list(range(s, rows, streams)) * 3)
        for batch in range(3):
            written = ids[per_stream * batch : per_stream * (batch + 1)]
            for part in ([i for i in written if i < rows // 2], [i for i in written if i >= rows // 2]):
                assert part == sorted(part)


def test_a_grouped_split_hands_each_task_whole_streams_without_a_sort(spark: SparkSession) -> None:
    """A split that groups rows by stream has Spark hash them into small partitions, not sort them: the
    plan holds no sort, and each batch a task gets holds every row of its streams (no stream in two
    batches or two tasks), each input partition's rows in order."""
    split = StreamSplit()  # the first batch's split: grouped
    df = spark.range(6_000, numPartitions=3).withColumn(
        STREAM_COLUMN, F.concat(F.lit("t/"), F.lpad((F.col("id") % 300).cast("string"), 3, "0"))
    )
    frame = split.split(df, FrameShape(partitions=3, size_bytes=None, cores=2), 2)
    assert "Sort" not in frame._jdf.queryExecution().executedPlan().toString()

    def seen(batches: Any) -> Any:
        task = TaskContext.get()
        assert task is not None
        for n, b in enumerate(batches):
            yield pa.record_batch(
                {
                    "batch": pa.array([task.partitionId() * 1_000_000 + n] * b.num_rows, pa.int64()),
                    "stream": b.column(STREAM_COLUMN),
                    "id": b.column("id"),
                }
            )

    rows = frame.mapInArrow(split.writes(seen), "batch long, stream string, id long").collect()
    assert sorted(r["id"] for r in rows) == list(range(6_000))
    where: dict[str, set[int]] = {}
    ids: dict[str, list[int]] = {}
    for r in rows:
        where.setdefault(r["stream"], set()).add(r["batch"])
        ids.setdefault(r["stream"], []).append(r["id"])
    assert all(len(batches) == 1 for batches in where.values())
    for s in ids.values():  # the input partitions hold ids below 2,000, 2,000-3,999, and the rest
        for part in (
            [i for i in s if i < 2_000],
            [i for i in s if 2_000 <= i < 4_000],
            [i for i in s if i >= 4_000],
        ):
            assert part == sorted(part)
