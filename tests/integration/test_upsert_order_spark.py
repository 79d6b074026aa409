"""Upsert change order end to end on local Spark against the lite server: with ``order_by``, every key's
changes reach its stream in ``order_by`` order and the materialized table is the one ``order_by`` defines,
whatever the input partitioning, on a normal write and on an exactly-once replay after a dead run."""

from __future__ import annotations

import logging
import math
import random
from typing import Any

import orjson
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from s2_sink import S2Config, S2Writer
from s2_sink._exactly_once.identity import session_facts
from s2_sink._write.driver.batch_layout import laid_out
from s2_sink._write.task.results import RESULT_DDL
from s2_sink.encoders import UpsertEncoder
from s2_sink.lite import LiteServer
from tests.integration._eo_batches import new_driver_process
from tests.integration._s2read import read_stream

pytestmark = pytest.mark.spark

SCHEMA = "k string, v int, op string, pos bigint"
KEYS = [f"key-{i}" for i in range(6)]
# Eight changes per key, a delete among them; pos is the change order.
CHANGES = [
    (k, pos * 10 + i, "d" if pos == 5 else "u", pos * 100 + i) for pos in range(8) for i, k in enumerate(KEYS)
]
Change = tuple[str, int, str, int]


def _cfg(lite: LiteServer, basin: str, stream: str) -> S2Config:
    return S2Config(
        basin=basin,
        stream=stream,
        access_token="test",
        account_endpoint=lite.endpoint,
        basin_endpoint=lite.endpoint,
        batch_max_records=5,  # many appends per task: the order must hold across them
    )


def _encoder(**kw: Any) -> UpsertEncoder:
    return UpsertEncoder(["k"], op_column="op", order_by="pos", exclude_columns=["pos"], **kw)


def _split(spark: SparkSession, changes: list[Change], seed: int, slices: int) -> DataFrame:
    """`changes` shuffled by `seed` over `slices` input partitions: a key's changes in several of them."""
    shuffled = list(changes)
    random.Random(seed).shuffle(shuffled)
    return spark.createDataFrame(spark.sparkContext.parallelize(shuffled, slices), SCHEMA)


def _per_key(lite: LiteServer, basin: str, stream: str) -> dict[str, list[dict[str, Any] | None]]:
    """Each key's changes as its stream has them (None for a delete), in stream order."""
    out: dict[str, list[dict[str, Any] | None]] = {}
    for rec in read_stream(lite.endpoint, basin, stream):
        headers = dict(rec.headers)
        key = orjson.loads(headers[b"@key"])["k"]
        out.setdefault(key, []).append(orjson.loads(rec.body) if headers[b"@action"] == b"u" else None)
    return out


def _expected(changes: list[Change]) -> dict[str, list[dict[str, Any] | None]]:
    out: dict[str, list[dict[str, Any] | None]] = {}
    for k, v, op, _ in sorted(changes, key=lambda c: c[3]):
        out.setdefault(k, []).append({"v": v} if op == "u" else None)
    return out


@pytest.mark.parametrize(("seed", "slices"), [(1, 4), (2, 3), (3, 7)])
def test_every_partitioning_writes_each_key_in_order_by_order(
    spark: SparkSession, lite: LiteServer, basin: str, seed: int, slices: int
) -> None:
    """One key's changes spread over several input partitions, split three different ways: each key's
    stream has its changes in pos order, and with compact=True only its last change by pos."""
    df = _split(spark, CHANGES, seed, slices)
    assert df.rdd.glom().filter(lambda part: any(r.k == "key-0" for r in part)).count() > 1
    S2Writer(_cfg(lite, basin, "full"), _encoder(), delivery="at-least-once")(df, 0)
    assert _per_key(lite, basin, "full") == _expected(CHANGES)
    S2Writer(_cfg(lite, basin, "compact"), _encoder(compact=True), writer_id=f"compact-{seed}")(df, 0)
    assert _per_key(lite, basin, "compact") == {k: v[-1:] for k, v in _expected(CHANGES).items()}


def test_without_order_by_the_input_order_is_the_order(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """The control: one partition holding a key's changes in reverse pos order is written in that (input)
    order without order_by, and in pos order with it."""
    reverse = sorted(CHANGES, key=lambda c: -c[3])
    df = spark.createDataFrame(spark.sparkContext.parallelize(reverse, 1), SCHEMA)
    plain = UpsertEncoder(["k"], op_column="op", exclude_columns=["pos"])
    S2Writer(_cfg(lite, basin, "plain"), plain, delivery="at-least-once")(df, 0)
    S2Writer(_cfg(lite, basin, "ordered"), _encoder(), delivery="at-least-once")(df, 0)
    assert _per_key(lite, basin, "plain") == {k: v[::-1] for k, v in _expected(CHANGES).items()}
    assert _per_key(lite, basin, "ordered") == _expected(CHANGES)


def test_replay_after_a_dead_run_keeps_each_keys_order(
    spark: SparkSession, lite: LiteServer, basin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A dead run of writer "w" wrote the first five changes of three keys (in its own partitioning) and
    never committed; a new writer object with the same writer_id replays the micro-batch split another
    way: the recovery lays it out by key, sorts by pos and subtracts the dead run's records, so each key's
    stream is its eight changes in pos order, each once."""
    cfg = _cfg(lite, basin, "cdc")
    dead = S2Writer(cfg, _encoder(), writer_id="w")
    rows, encoding = dead.rows(_split(spark, CHANGES, 5, 2))
    job = dead.mode.prepare(0, session_facts(spark))
    assert job is not None
    assert not job.recovery_layout  # the dead run's first batch
    prefix = [c for c in CHANGES if c[0] in KEYS[:3] and c[3] < 500]
    survivors = rows.filter(rows["pos"] < 500).filter(rows["k"].isin(*KEYS[:3]))
    laid = laid_out(survivors, encoding, tasks=2, by_key=True)
    laid.frame.mapInArrow(laid.writes(job.plan), RESULT_DDL).collect()  # then the driver dies: no commit
    assert _per_key(lite, basin, "cdc") == _expected(prefix)

    caplog.set_level(logging.WARNING, logger="s2_sink")
    new_driver_process()
    replay = S2Writer(cfg, _encoder(), writer_id="w")
    replay(_split(spark, CHANGES, 6, 5), 0)
    assert "replays after a driver restart" in caplog.text  # the recovery path ran
    assert _per_key(lite, basin, "cdc") == _expected(CHANGES)


@pytest.mark.parametrize("driver_rows", [0, 10_000], ids=["tasks", "driver"])
def test_compaction_keeps_each_streams_last_change_of_a_key(
    spark: SparkSession, lite: LiteServer, basin: str, driver_rows: int
) -> None:
    """compact=True with routed streams: each key's changes alternate between two streams, spread over the
    input partitions; each stream keeps the key's last change among the ones routed to it (as its
    uncompacted changes would end), not only the stream that holds the key's very last change. Written by
    the write tasks and, as a small batch, from the driver."""
    region = F.when(F.floor(F.col("pos") / 100) % 2 == 0, "even").otherwise("odd")
    df = _split(spark, CHANGES, 4, 3).withColumn("region", region)
    cfg = _cfg(lite, basin, "ignored")
    cfg = cfg.replace(stream=None, create_streams=True, driver_write_max_rows=driver_rows)
    writer_id = f"routed-compact-{driver_rows}"
    S2Writer(cfg, _encoder(compact=True), stream_column="region", writer_id=writer_id)(df, 0)
    for parity, stream in ((0, "even"), (1, "odd")):
        routed = [c for c in CHANGES if c[3] // 100 % 2 == parity]
        assert _per_key(lite, basin, stream) == {k: v[-1:] for k, v in _expected(routed).items()}


TIE_SCHEMA = "k double, v string, pos double"
# Keys 0.0 and -0.0 are one value to Spark's sort but two keys ({"k":0.0}, {"k":-0.0}); positions that
# tie as Spark's sort compares them (1.0 twice, -0.0 with 0.0, NaN twice), the tie broken by the body.
TIES = [
    (k, f"{name}{i}", pos)
    for k in (0.0, -0.0, 1.5)
    for i, (name, pos) in enumerate(
        [
            ("b", 1.0),
            ("a", 1.0),
            ("c", 1.0),
            ("n", math.nan),
            ("m", math.nan),
            ("z", -0.0),
            ("y", 0.0),
            ("q", 2.0),
        ]
    )
]


def _spark_position(pos: float) -> tuple[int, float]:
    return (1, 0.0) if math.isnan(pos) else (0, pos + 0.0)


def _tied_per_key(changes: list[tuple[float, str, float]]) -> dict[bytes, list[bytes]]:
    """Each key's bodies in change order: by pos as Spark orders it, ties by the body's bytes."""
    out: dict[bytes, list[bytes]] = {}
    ordered = sorted(changes, key=lambda c: (_spark_position(c[2]), orjson.dumps({"v": c[1]})))
    for k, v, _ in ordered:
        out.setdefault(orjson.dumps({"k": k}), []).append(orjson.dumps({"v": v}))
    return out


def _bodies_per_key(lite: LiteServer, basin: str, stream: str) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for rec in read_stream(lite.endpoint, basin, stream):
        out.setdefault(dict(rec.headers)[b"@key"], []).append(bytes(rec.body))
    return out


@pytest.mark.parametrize(("split", "driver_rows"), [((1, 3), 0), ((2, 5), 0), ((3, 2), 10_000)])
def test_ties_are_written_in_body_order_whatever_the_split(
    spark: SparkSession, lite: LiteServer, basin: str, split: tuple[int, int], driver_rows: int
) -> None:
    """Changes of a key that tie on pos (as Spark compares doubles: -0.0 = 0.0, NaN = NaN) spread over the
    input partitions: each key's stream has them in pos order, ties in the order of their bodies' bytes,
    the float keys 0.0 and -0.0 apart; compact=True keeps each key's last by that order. Written by the
    write tasks and, as a small batch, from the driver."""
    seed, slices = split
    rows = list(TIES)
    random.Random(seed).shuffle(rows)
    df = spark.createDataFrame(spark.sparkContext.parallelize(rows, slices), TIE_SCHEMA)
    encoder = UpsertEncoder(["k"], order_by="pos", exclude_columns=["pos"])
    cfg = _cfg(lite, basin, "ignored").replace(driver_write_max_rows=driver_rows)
    S2Writer(cfg.replace(stream=f"ties-{seed}"), encoder, delivery="at-least-once")(df, 0)
    assert _bodies_per_key(lite, basin, f"ties-{seed}") == _tied_per_key(TIES)
    compact = UpsertEncoder(["k"], order_by="pos", exclude_columns=["pos"], compact=True)
    S2Writer(cfg.replace(stream=f"last-{seed}"), compact, delivery="at-least-once")(df, 0)
    assert _bodies_per_key(lite, basin, f"last-{seed}") == {k: v[-1:] for k, v in _tied_per_key(TIES).items()}


def test_sharded_streams_hold_each_keys_changes_in_order(
    spark: SparkSession, lite: LiteServer, basin: str
) -> None:
    """Sharded routing with order_by: the shard is computed in the write task from the encoded key, after
    Spark placed and sorted the rows by their key columns alone; each key's changes are in one shard, in
    pos order, and compact=True keeps one change per key there."""
    df = _split(spark, CHANGES, 8, 4)
    cfg = _cfg(lite, basin, "shard").replace(create_streams=True, driver_write_max_rows=0)
    S2Writer(cfg, _encoder(), shards=3, delivery="at-least-once")(df, 0)
    found: dict[str, list[dict[str, Any] | None]] = {}
    for shard in range(3):
        for key, changes in _per_key(lite, basin, f"shard/{shard}").items():
            assert key not in found  # a key is in one shard
            found[key] = changes
    assert found == _expected(CHANGES)
    compact = cfg.replace(stream="last")
    S2Writer(compact, _encoder(compact=True), shards=3, delivery="at-least-once")(df, 0)
    last = [_per_key(lite, basin, f"last/{shard}") for shard in range(3)]
    assert {k: v for per in last for k, v in per.items()} == {
        k: v[-1:] for k, v in _expected(CHANGES).items()
    }


# Keys equal under the column's collation but two keys to a reader (@key holds their bytes); Spark's sort
# ties them, so their changes interleave unless the bytes sort them apart. "a" at pos 2 is a bad row.
COLLATED = [("A", 1, "u", 1), ("a", 2, "zz", 2), ("A", 3, "u", 3), ("B", 4, "u", 1), ("b", 5, "u", 2)]
COLLATED += [("B", 6, "u", 3)]


@pytest.mark.parametrize("driver_rows", [0, 10_000], ids=["tasks", "driver"])
def test_compaction_keeps_one_change_per_key_of_a_collated_key_column(
    spark: SparkSession, lite: LiteServer, basin: str, driver_rows: int
) -> None:
    """A UTF8_LCASE key column: "A" and "a" are one value to Spark's sort but two keys, whose changes
    Spark leaves interleaved by pos; compact=True still keeps one change per key, its last, whether the
    change between is of a good or a bad row."""
    df = spark.createDataFrame(spark.sparkContext.parallelize(COLLATED, 2), SCHEMA)
    df = df.withColumn("k", F.collate("k", "UTF8_LCASE"))
    cfg = _cfg(lite, basin, f"collated-{driver_rows}").replace(driver_write_max_rows=driver_rows)
    S2Writer(cfg, _encoder(compact=True), delivery="at-least-once", on_error="skip")(df, 0)
    expected = {"A": [{"v": 3}], "b": [{"v": 5}], "B": [{"v": 6}]}
    assert _per_key(lite, basin, f"collated-{driver_rows}") == expected
