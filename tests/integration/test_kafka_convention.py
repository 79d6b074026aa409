"""A Kafka-shaped frame through S2Writer and format("s2") (s2.format=kafka), read back with s2.format=kafka:
the same key, value, headers and timestamp, routed by the topic column; JVM and Arrow encodings agree."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

from s2_sink.config import S2Config
from s2_sink.datasource import register
from s2_sink.encoders import KafkaEncoder
from s2_sink.writer import S2Writer
from tests.integration.test_datasource_read import new_basin, opts

pytestmark = [pytest.mark.spark]

KAFKA_DDL = (
    "key binary, value binary, headers array<struct<key:string,value:binary>>, timestamp timestamp, "
    "topic string, partition int, offset long"
)


def kafka_frame(spark: SparkSession) -> DataFrame:
    """Rows shaped as Kafka's source gives them: null and empty keys, repeated and no headers, two topics.

    One partition in timestamp order: S2 keeps a stream's timestamps non-decreasing, so a timestamp below
    an earlier record's would come back raised to it."""
    t0 = dt.datetime(2024, 5, 1, tzinfo=dt.UTC)
    rows = [
        (
            None if i % 5 == 0 else f"k{i % 3}".encode() if i % 5 != 1 else b"",
            f'{{"n":{i}}}'.encode(),
            [] if i % 4 == 0 else [("trace", f"t{i}".encode()), ("trace", b"")][: 1 + i % 2],
            t0 + dt.timedelta(milliseconds=i),
            "orders" if i % 2 else "payments",
            i % 3,
            1000 + i,
        )
        for i in range(40)
    ]
    return spark.createDataFrame(rows, KAFKA_DDL).coalesce(1)


def expected(df: DataFrame) -> set[tuple[Any, ...]]:
    """(topic, key, value, headers, timestamp ms) of every input row."""
    return {
        (
            r.topic,
            None if r.key is None else bytes(r.key),
            bytes(r.value),
            tuple((h.key, bytes(h.value)) for h in r.headers),
            r.ms,
        )
        for r in df.selectExpr("*", "unix_millis(timestamp) AS ms").collect()
    }


def read_back(spark: SparkSession, endpoint: str, basin: str) -> set[tuple[Any, ...]]:
    """Both streams read with s2.format=kafka, as the same tuples (stream name as the topic)."""
    back = (
        spark.read.format("s2")
        .options(**opts(endpoint, basin, **{"s2.streams": "orders,payments", "s2.format": "kafka"}))
        .load()
    )
    assert back.columns == ["stream", "seq_num", "timestamp", "key", "value", "headers"]
    rows = back.selectExpr("stream", "key", "value", "headers", "unix_millis(timestamp) AS ms").collect()
    got = [
        (
            r.stream,
            None if r.key is None else bytes(r.key),
            bytes(r.value),
            tuple((h.key, bytes(h.value)) for h in r.headers),
            r.ms,
        )
        for r in rows
    ]
    assert len(got) == len(set(got)), "a record was written twice"
    return set(got)


@pytest.fixture(scope="module")
def sp(spark: SparkSession) -> SparkSession:
    """The shared Spark session with format("s2") registered."""
    register(spark)
    return spark


def test_s2writer_round_trip(sp: SparkSession, lite: Any) -> None:
    """S2Writer(KafkaEncoder(), stream_column="topic") writes what a kafka read gives back unchanged,
    timestamps included (at-least-once: nothing else is appended to the streams)."""
    basin = new_basin(lite.endpoint)
    df = kafka_frame(sp)
    cfg = S2Config(
        basin=basin, account_endpoint=lite.endpoint, basin_endpoint=lite.endpoint, create_streams=True
    )
    S2Writer(cfg, KafkaEncoder(), stream_column="topic", delivery="at-least-once")(df, 0)
    assert read_back(sp, lite.endpoint, basin) == expected(df)


def test_s2writer_exactly_once_round_trip(sp: SparkSession, lite: Any) -> None:
    """Exactly-once, the headers read back hold neither the key header nor the chunk tag; timestamps older
    than the run's fence record (appended now) come back raised to it, never lowered."""
    basin = new_basin(lite.endpoint)
    df = kafka_frame(sp)
    cfg = S2Config(
        basin=basin, account_endpoint=lite.endpoint, basin_endpoint=lite.endpoint, create_streams=True
    )
    S2Writer(cfg, KafkaEncoder(), stream_column="topic", writer_id="kafka-round-trip")(df, 0)
    got = {row[:-1]: row[-1] for row in read_back(sp, lite.endpoint, basin)}
    want = {row[:-1]: row[-1] for row in expected(df)}
    assert got.keys() == want.keys()
    assert all(got[k] >= want[k] for k in want)


def test_format_write_round_trip(sp: SparkSession, lite: Any) -> None:
    """df.write.format("s2") with s2.format=kafka and s2.stream-column=topic round-trips the same way."""
    basin = new_basin(lite.endpoint)
    df = kafka_frame(sp)
    w = opts(
        lite.endpoint,
        basin,
        **{"s2.format": "kafka", "s2.stream-column": "topic", "s2.create-streams": "true"},
    )
    df.write.format("s2").options(**w).mode("append").save()
    assert read_back(sp, lite.endpoint, basin) == expected(df)


def test_raw_read_shows_the_key_header(sp: SparkSession, lite: Any) -> None:
    """Other readers see the key as the first header, @kafka-key, before the record's own headers."""
    basin = new_basin(lite.endpoint, "orders")
    df = sp.createDataFrame(
        [(b"k", b"v", [("h", b"x")], "orders")],
        "key binary, value binary, headers array<struct<key:string,value:binary>>, topic string",
    )
    cfg = S2Config(basin=basin, account_endpoint=lite.endpoint, basin_endpoint=lite.endpoint)
    S2Writer(cfg, KafkaEncoder(), stream_column="topic", delivery="at-least-once")(df, 0)
    raw = sp.read.format("s2").options(**opts(lite.endpoint, basin, **{"s2.stream": "orders"})).load()
    (row,) = raw.collect()
    assert [(bytes(h.key), bytes(h.value)) for h in row.headers] == [(b"@kafka-key", b"k"), (b"h", b"x")]
    assert bytes(row.body) == b"v"
