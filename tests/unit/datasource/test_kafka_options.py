"""Kafka source options given to format("s2") reads are refused on the driver, each naming the option, its
value and the s2 option (with the translated value where it carries over). No server: the refusal comes
before any connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from s2_sink._read.rows.schemas import default_schema
from s2_sink.datasource._refused_options import KAFKA_OPTIONS
from s2_sink.datasource._source import S2DataSource
from s2_sink.errors import ConfigError

_BASE = {
    "s2.preflight": "false",  # no server here
    "s2.basin": "unused-basin",
    "s2.endpoints.account": "http://127.0.0.1:9",
    "s2.endpoints.basin": "http://127.0.0.1:9",
    "s2.stream": "s",
}


def _refusal(extra: dict[str, str], *, streaming: bool = True) -> str:
    # Spark hands a Python source its option names lower-cased; users' spellings must be refused too.
    source = S2DataSource({**_BASE, **extra})
    plan = source.streamReader if streaming else source.reader
    with pytest.raises(ConfigError) as info:
        plan(default_schema("raw"))
    return str(info.value)


@pytest.mark.parametrize("name", sorted(KAFKA_OPTIONS))
@pytest.mark.parametrize("spelling", [str.lower, lambda name: name])
def test_every_kafka_source_option_is_refused_naming_it_its_value_and_the_fix(name: str, spelling) -> None:  # type: ignore[no-untyped-def]
    """Each option of Spark's Kafka source, in Kafka's spelling or lower-cased, fails a read with a message
    naming the option as given, its value and what to use instead."""
    key = spelling(name)
    text = _refusal({key: "zz-value"})
    assert text.startswith(f"option {key}='zz-value' is a Kafka source option")
    assert KAFKA_OPTIONS[name] in text


@pytest.mark.parametrize(
    ("kafka", "s2"),
    [
        ({"startingOffsets": "earliest"}, ".option('s2.starting-position', 'earliest')"),
        ({"startingOffsets": "LATEST"}, ".option('s2.starting-position', 'latest')"),
        (
            {"startingOffsets": '{"orders": {"0": 42}, "audit": {"0": 7}}'},
            """.option('s2.starting-position', '{"orders": 42, "audit": 7}')""",
        ),
        ({"endingOffsets": '{"orders": {"0": 9}}'}, """.option('s2.ending-position', '{"orders": 9}')"""),
        ({"subscribe": "orders"}, ".option('s2.stream', 'orders')"),
        ({"subscribe": "orders, audit"}, ".option('s2.streams', 'orders,audit')"),
        ({"subscribePattern": "orders/.*"}, ".option('s2.stream-prefix', 'orders/')"),
        ({"failOnDataLoss": "False"}, ".option('s2.fail-on-data-loss', 'false')"),
        ({"maxOffsetsPerTrigger": "1000"}, ".option('s2.max-records-per-trigger', '1000')"),
        ({"startingTimestamp": "1700000000000"}, ".option('s2.starting-timestamp', '1700000000000')"),
        ({"includeHeaders": "true"}, ".option('s2.format', 'kafka')"),
    ],
)
def test_values_that_carry_over_are_translated(kafka: dict[str, str], s2: str) -> None:
    """Where a Kafka value means the same for s2 (earliest/latest, partition-0 offsets, topic lists, a
    prefix pattern, booleans, counts), the message gives the exact s2 option call."""
    assert f"use {s2} instead" in _refusal(kafka)


@pytest.mark.parametrize(
    "kafka",
    [
        {"startingOffsets": '{"orders": {"0": 1, "1": 5}}'},  # partitions other than 0: no s2 equivalent
        {"startingOffsets": '{"orders": {"0": -2}}'},  # Kafka's "earliest" for one partition
        {"subscribePattern": "(orders|audit)"},  # a regex, not a prefix
    ],
)
def test_values_that_do_not_carry_over_get_the_option_and_its_shape(kafka: dict[str, str]) -> None:
    """A Kafka value with no s2 translation still gets the s2 option and the shape its value takes."""
    text = _refusal(kafka)
    assert ".option(" not in text
    assert "use s2." in text


def test_kafka_client_settings_are_refused_without_showing_their_value() -> None:
    """kafka.* client settings (bootstrap servers, SASL) are refused with the S2 connection options; the value
    is not echoed, since such settings hold credentials."""
    text = _refusal({"kafka.sasl.jaas.config": "secret-password-123"})
    assert "kafka.sasl.jaas.config is a Kafka client setting" in text
    assert "s2.basin" in text
    assert "secret-password-123" not in text


def test_batch_reads_refuse_kafka_options_too() -> None:
    """spark.read.format('s2') refuses Kafka options as readStream does."""
    assert "s2.ending-position" in _refusal({"endingOffsets": "latest"}, streaming=False)


def test_options_that_only_look_like_kafka_ones_pass() -> None:
    """Options outside Kafka's names and our namespaces (Spark's own, such as path) are left alone."""
    source = S2DataSource({**_BASE, "path": "p", "checkpointLocation": "/tmp/x"})
    assert source.reader(default_schema("raw")) is not None


def test_the_docs_table_names_every_refused_option() -> None:
    """docs/kafka-options.md has a table row for every Kafka option the reader refuses, and no other."""
    doc = (Path(__file__).resolve().parents[3] / "docs" / "kafka-options.md").read_text()
    table = doc.split("| Kafka source option |")[1].split("\n\n")[0]
    rows = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    assert rows == set(KAFKA_OPTIONS)


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("startingOffset", "startingOffsets"),
        ("maxOffsetPerTrigger", "maxOffsetsPerTrigger"),
        ("failOnDataLos", "failOnDataLoss"),
    ],
)
def test_a_misspelt_kafka_option_is_refused_as_that_option(key: str, meant: str) -> None:
    """A Kafka option misspelt still gets the s2 option to use, rather than passing as a foreign option."""
    text = _refusal({key: "1"})
    assert text.startswith(f"unknown option {key}='1', close to the Kafka source option {meant}")
    assert KAFKA_OPTIONS[meant] in text


@pytest.mark.parametrize(
    ("key", "meant"),
    [
        ("s2_stream_prefix", "s2.stream-prefix"),
        ("max-records-per-trigger", "s2.max-records-per-trigger"),
        ("fail-on-data-loss", "s2.fail-on-data-loss"),
        ("S2-Starting-Position", "s2.starting-position"),
    ],
)
def test_one_of_our_options_outside_our_namespace_gets_did_you_mean(key: str, meant: str) -> None:
    """An s2 option written without (or with a wrong) namespace is refused with the key it was close to,
    instead of being ignored as another source's option."""
    assert _refusal({key: "1"}).startswith(f"unknown option {key}='1': did you mean {meant}?")
