"""s2.format=kafka on the data source, without Spark: the read conversion, the schema check, the options."""

from __future__ import annotations

import pytest
from pyspark.sql.types import BinaryType, StringType, StructField, StructType
from s2_sdk import SequencedRecord

from s2_sink._read.read_options import parse_read_options
from s2_sink._read.rows.schemas import KAFKA_SCHEMA, check_schema, default_schema
from s2_sink.config import S2Config
from s2_sink.datasource._write_options import parse_write_options
from s2_sink.encoders import KafkaEncoder
from s2_sink.errors import ConfigError
from tests.rows_by_record import records_to_batch

LITE = "http://127.0.0.1:8080"


def test_records_become_kafka_columns() -> None:
    """The first @kafka-key header is the key (null without one); headers keep the rest, in order, without
    the exactly-once chunk tag; a second @kafka-key header is user data and stays."""
    records = [
        SequencedRecord(
            seq_num=7,
            body=b"v",
            headers=[(b"@kafka-key", b"k"), (b"h", b"1"), (b"@kafka-key", b"again"), (b"@s2sink", b"1 ab")],
            timestamp=1_000,
        ),
        SequencedRecord(seq_num=8, body=b"", headers=[], timestamp=2_000),
        SequencedRecord(seq_num=9, body=b"w", headers=[(b"@kafka-key", b"")], timestamp=3_000),
    ]
    batch = records_to_batch("kafka", KAFKA_SCHEMA, "clicks", records)
    assert batch.schema.names == ["stream", "seq_num", "timestamp", "key", "value", "headers"]
    rows = batch.to_pylist()
    assert [(r["stream"], r["seq_num"], r["key"], r["value"]) for r in rows] == [
        ("clicks", 7, b"k", b"v"),
        ("clicks", 8, None, b""),
        ("clicks", 9, b"", b"w"),
    ]
    assert [r["headers"] for r in rows] == [
        [{"key": "h", "value": b"1"}, {"key": "@kafka-key", "value": b"again"}],
        [],
        [],
    ]


def test_kafka_schema_and_projection() -> None:
    """The default schema is Kafka's columns; a subset projects, a foreign or mistyped column is refused."""
    assert default_schema("kafka") == KAFKA_SCHEMA
    subset = StructType([StructField("key", BinaryType()), StructField("value", BinaryType(), False)])
    check_schema("kafka", subset)
    assert records_to_batch("kafka", subset, "s", [SequencedRecord(0, b"v", [], 0)]).to_pylist() == [
        {"key": None, "value": b"v"}
    ]
    with pytest.raises(ConfigError, match=r"'body' is not produced by s2.format=kafka"):
        check_schema("kafka", StructType([StructField("body", BinaryType())]))
    with pytest.raises(ConfigError, match=r"'key' of s2.format=kafka has type binary, not string"):
        check_schema("kafka", StructType([StructField("key", StringType())]))


def test_options_select_kafka_on_both_sides() -> None:
    """s2.format=kafka is a read format and a write format (KafkaEncoder with the named columns); options of
    other formats are refused on a kafka write, naming the option."""
    assert parse_read_options({"s2.stream": "s", "s2.format": "kafka"}, streaming=True).format == "kafka"
    with pytest.raises(ConfigError, match=r"raw \| json \| upsert \| kafka"):
        parse_read_options({"s2.stream": "s", "s2.format": "avro"}, streaming=False)
    cfg = S2Config(basin="my-basin", stream="s", account_endpoint=LITE, basin_endpoint=LITE)
    opts = parse_write_options(
        {"s2.format": "kafka", "s2.key-column": "k", "s2.value-column": "v"}, cfg=cfg, streaming=False
    )
    assert isinstance(opts.encoder, KafkaEncoder)
    assert (opts.encoder.key_column, opts.encoder.value_column) == ("k", "v")
    for option in ("s2.exclude-columns", "s2.key-columns"):
        with pytest.raises(ConfigError, match=f"option {option} does not apply to s2.format=kafka"):
            parse_write_options({"s2.format": "kafka", option: "x"}, cfg=cfg, streaming=False)
