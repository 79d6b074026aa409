"""Exactly-once under the ways users wire the writer, in real Spark through the public API.

Spark's "write to multiple locations" pattern (two writers in one ``foreachBatch``, each with its
``writer_id``; without them the second is refused, and naming them fixes it), one writer called twice in a
batch, and a query restarted from its checkpoint under a new ``writer_id``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from s2_sink import S2Writer
from s2_sink.lite import LiteServer
from tests.integration._s2read import list_streams
from tests.integration.test_writer_spark import bodies, cfg_for, rows_df


def _stream_files(spark: SparkSession, tmp_path: Path, sizes: list[int]) -> DataFrame:
    """A file source with one parquet file per micro-batch, ids 0.. across the files."""
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    start = 0
    for i, n in enumerate(sizes):
        stage = tmp_path / f"stage{i}"
        rows_df(spark, n).selectExpr(f"id + {start} AS id", "region", "amount").coalesce(1).write.parquet(
            str(stage)
        )
        next(stage.glob("*.parquet")).rename(src / f"part-{i:04d}.parquet")
        start += n
    schema = rows_df(spark, 1).selectExpr("id", "region", "amount").schema
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))


def _run(source: DataFrame, fn: Callable[[DataFrame, int], Any], checkpoint: Path) -> BaseException | None:
    query = (
        source.writeStream.foreachBatch(fn)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(240)
    except Exception as exc:  # noqa: BLE001 - the query's failure is what the test looks at
        return exc
    return query.exception()


def test_two_writers_in_one_foreach_batch_each_write_exactly_once(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """Spark's "write to multiple locations": one function writes every row to stream a and the small ones to
    stream b, each writer with its writer_id. Each keeps its own ledger, so neither skips the other's
    batches: a 300/300, b 200/200 (before identities were per writer, b got 0 and no error)."""
    to_a = S2Writer(cfg_for(lite, basin, "a", create_streams=True), writer_id="orders-to-a")
    to_b = S2Writer(cfg_for(lite, basin, "b", create_streams=True), writer_id="orders-to-b")

    def both(df: DataFrame, batch_id: int) -> None:
        to_a(df, batch_id)
        to_b(df.filter("id % 3 != 2"), batch_id)

    source = _stream_files(spark, tmp_path, [150, 150])
    assert _run(source, both, tmp_path / "ckpt") is None
    a = sorted(b["id"] for b in bodies(lite, basin, "a"))
    b = sorted(b["id"] for b in bodies(lite, basin, "b"))
    assert a == list(range(300))
    assert b == [i for i in range(300) if i % 3 != 2]
    assert len(b) == 200


def test_two_writers_without_writer_ids_are_refused_and_the_fix_writes_each_row_once(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """The same function with two writers that share the query's default identity: the second is refused
    before it writes (ConfigError: a writer_id for each), after the first committed micro-batch 0. The user
    names both and restarts from the checkpoint: the writer to a goes on from the query id's ledger (its
    routing is the one that ledger recorded) and skips the replayed batch 0, the writer to b starts anew
    and writes it. a 300/300, b 200/200, nothing twice."""
    cfg_a = cfg_for(lite, basin, "a", create_streams=True)
    cfg_b = cfg_for(lite, basin, "b", create_streams=True)

    def both_of(to_a: S2Writer, to_b: S2Writer) -> Callable[[DataFrame, int], None]:
        def both(df: DataFrame, batch_id: int) -> None:
            to_a(df, batch_id)
            to_b(df.filter("id % 3 != 2"), batch_id)

        return both

    source = _stream_files(spark, tmp_path, [150, 150])
    failure = _run(source, both_of(S2Writer(cfg_a), S2Writer(cfg_b)), tmp_path / "ckpt")
    assert failure is not None
    assert "two S2Writer objects write micro-batch 0" in str(failure)
    assert "give each S2Writer a writer_id of its own" in str(failure)
    assert len(bodies(lite, basin, "a")) == 150
    assert "b" not in list_streams(lite.endpoint, basin)  # refused before anything, its stream included

    named = both_of(S2Writer(cfg_a, writer_id="orders-to-a"), S2Writer(cfg_b, writer_id="orders-to-b"))
    assert _run(source, named, tmp_path / "ckpt") is None
    a = sorted(b["id"] for b in bodies(lite, basin, "a"))
    b = sorted(b["id"] for b in bodies(lite, basin, "b"))
    assert a == list(range(300))
    assert b == [i for i in range(300) if i % 3 != 2]


def test_one_writer_called_twice_in_a_batch_is_refused(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """One writer object given two frames in one micro-batch would skip the second (the batch is committed):
    the query fails with a ConfigError that says to union the frames or use one writer per target."""
    writer = S2Writer(cfg_for(lite, basin, "events", create_streams=True))

    def twice(df: DataFrame, batch_id: int) -> None:
        writer(df.filter("id % 2 = 0"), batch_id)
        writer(df.filter("id % 2 = 1"), batch_id)

    failure = _run(_stream_files(spark, tmp_path, [40]), twice, tmp_path / "ckpt")
    assert failure is not None
    assert "called again for micro-batch 0" in str(failure)
    assert "Union the frames" in str(failure)
    assert "writer_id of its own" in str(failure)


def test_two_writer_objects_for_one_destination_are_refused(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path
) -> None:
    """Two writer objects with the same destination in one foreachBatch share an identity: the second is
    refused rather than finding the batch committed and skipping it."""
    first = S2Writer(cfg_for(lite, basin, "events", create_streams=True))
    second = S2Writer(cfg_for(lite, basin, "events", create_streams=True))

    def both(df: DataFrame, batch_id: int) -> None:
        first(df, batch_id)
        second(df, batch_id)

    failure = _run(_stream_files(spark, tmp_path, [10]), both, tmp_path / "ckpt")
    assert failure is not None
    assert "two S2Writer objects write micro-batch 0" in str(failure)


@pytest.mark.parametrize("explicit_first", [True, False])
def test_a_new_writer_id_on_the_same_checkpoint_writes_each_row_once(
    spark: SparkSession, lite: LiteServer, basin: str, tmp_path: Path, explicit_first: bool
) -> None:
    """The driver dies after the ledger committed batch 1 but before Spark did (here: on_metrics raises),
    and the query is restarted from its checkpoint under another writer_id (or, from the default identity,
    under a first explicit one). Spark replays batch 1; the new identity goes on from the old one's ledger,
    so nothing is written twice: 400 records for 400 rows (before: 600)."""
    cfg = cfg_for(lite, basin, "events", create_streams=True)

    def die_after_batch_1(metrics: Any) -> None:
        if metrics.batch_id == 1:
            raise RuntimeError("driver lost after the ledger commit")

    old_id = "orders-v1" if explicit_first else None
    first = S2Writer(cfg, writer_id=old_id, on_metrics=die_after_batch_1)
    source = _stream_files(spark, tmp_path, [100, 100, 100, 100])
    assert _run(source, first, tmp_path / "ckpt") is not None  # failed after batch 1's ledger commit
    assert len(bodies(lite, basin, "events")) == 200

    renamed = S2Writer(cfg, writer_id="orders-v2")
    assert _run(source, renamed, tmp_path / "ckpt") is None
    ids = [b["id"] for b in bodies(lite, basin, "events")]
    assert sorted(set(ids)) == list(range(400))
    assert len(ids) == 400, f"{len(ids) - 400} duplicates"
