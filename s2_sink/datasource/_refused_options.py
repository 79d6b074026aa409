"""The ``format("s2")`` options a read or a write refuses, each in words that say what to use instead.

Reads and writes share the connection options and ``s2.stream``/``s2.format``; anything else given to the
other side would be silently meaningless (users often keep one option dict), so it is refused on the driver
saying which side it belongs to, and a typo gets the closest keys ("did you mean"). Kafka source options given
to a read are refused too, each naming the s2 option (and, where it carries over, the value) that does its
job: a job moved from ``format("kafka")`` would otherwise silently keep reading from the default
(docs/kafka-options.md).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Final, Literal

from s2_sink._option_map import OptionMap
from s2_sink._read import read_options
from s2_sink.config import OPTION_KEYS, WRITE_ONLY_OPTION_KEYS
from s2_sink.datasource._write_keys import WRITE_KEYS
from s2_sink.errors import ConfigError

__all__ = [
    "KAFKA_OPTIONS",
    "OUR_PREFIXES",
    "READ_KEYS",
    "Side",
    "accepted_keys",
    "check_side",
    "check_strays",
    "refuse_kafka_options",
]

Side = Literal["read", "write"]

OUR_PREFIXES: Final = ("s2.", "sink.")
"""Spark adds options of its own (checkpointLocation, path, ...); only these namespaces are ours to check."""

_WHAT: Final[dict[Side, str]] = {
    "read": "reads (spark.read / spark.readStream .format('s2'))",
    "write": "writes (df.write / df.writeStream .format('s2'))",
}


READ_KEYS: Final = frozenset(v for name, v in vars(read_options).items() if name.startswith("OPT_"))
"""Options the reader parses itself (every OPT_ of read_options); any other must be a connection option."""


def accepted_keys(side: Side) -> frozenset[str]:
    """Every key a ``format("s2")`` read or write accepts: its own and the connection keys (a read leaves out
    those that only shape appends)."""
    connection = frozenset(OPTION_KEYS)
    if side == "read":
        return READ_KEYS | (connection - WRITE_ONLY_OPTION_KEYS)
    return WRITE_KEYS | connection


def check_side(options: Mapping[str, str], side: Side) -> None:
    """Refuse any of our options (``s2.*``, ``sink.*``) this side does not accept, saying which side it
    belongs to, or the closest accepted keys."""
    opts = OptionMap(options)
    mine = accepted_keys(side)
    other: Side = "write" if side == "read" else "read"
    theirs = accepted_keys(other)
    for key in sorted(opts):
        if not key.startswith(OUR_PREFIXES) or key in mine:
            continue
        spelled = f"{opts.spelling(key)}={str(opts[key])!r}"
        if key in theirs:
            raise ConfigError(
                f"option {spelled} applies to format('s2') {_WHAT[other]} only, not to {side}s: drop it here"
            )
        close = difflib.get_close_matches(key, sorted(mine), n=3, cutoff=0.6)
        if close:
            raise ConfigError(f"unknown option {spelled}: did you mean {' or '.join(close)}?")
        raise ConfigError(
            f"unknown option {spelled}. format('s2') {_WHAT[side]} accept: {', '.join(sorted(mine))}"
        )


def check_strays(options: Mapping[str, str], side: Side) -> None:
    """Refuse an option outside our namespaces that is one of ours misspelt (``s2_stream``,
    ``stream-prefix``); Spark's own options, and anything not close to ours (other sources' options may share
    the map), pass."""
    opts = OptionMap(options)
    mine = accepted_keys(side)
    # A key without its namespace ("stream-prefix") is compared too: the likeliest slip.
    bare = {key.split(".", 1)[1]: key for key in mine}
    for key in sorted(opts):
        if key.startswith(OUR_PREFIXES):
            continue
        close = difflib.get_close_matches(key, [*mine, *bare], n=1, cutoff=0.85)
        if close:
            meant = bare.get(close[0], close[0])
            raise ConfigError(
                f"unknown option {opts.spelling(key)}={str(opts[key])!r}: did you mean {meant}? format('s2') "
                "options start with s2. or sink."
            )


_CONNECT = (
    "S2 is reached with s2.basin, s2.auth-token (or S2_ACCESS_TOKEN) and, for a local or private "
    "endpoint, s2.endpoints.account / s2.endpoints.basin"
)
_NO_GROUPS = "S2 has no consumer groups: a streaming read's positions live in its checkpoint; drop the option"
_LONGER_TRIGGER = "nothing: set a longer trigger(processingTime=...) to batch more; drop the option"

# Kafka's spelling -> what to use instead. Names compare lower-cased, as Spark hands them to the source.
KAFKA_OPTIONS: Final[dict[str, str]] = {
    "subscribe": "s2.streams (comma-separated stream names) or s2.stream (one)",
    "assign": "s2.streams: an S2 stream is one ordered log, with no partitions to assign",
    "subscribePattern": "s2.stream-prefix: every stream whose name starts with the prefix (no regex)",
    "topic": "s2.stream",
    "startingOffsets": 's2.starting-position (earliest | latest | JSON {"stream": seq_num})',
    "endingOffsets": 's2.ending-position (batch reads: latest | JSON {"stream": seq_num})',
    "startingTimestamp": "s2.starting-timestamp (milliseconds since the epoch, for every stream)",
    "startingOffsetsByTimestamp": "s2.starting-timestamp (one timestamp in ms for every stream)",
    "startingOffsetsByTimestampStrategy": (
        "nothing: with s2.starting-timestamp a stream with no record at or after it starts at its tail; "
        "drop the option"
    ),
    "endingTimestamp": "s2.ending-timestamp (batch reads; milliseconds since the epoch)",
    "endingOffsetsByTimestamp": "s2.ending-timestamp (batch reads; one timestamp in ms for every stream)",
    "failOnDataLoss": "s2.fail-on-data-loss (true | false; streaming reads)",
    "maxOffsetsPerTrigger": "s2.max-records-per-trigger (records per micro-batch over all streams)",
    "maxBytesPerTrigger": "s2.max-bytes-per-trigger (metered bytes per micro-batch)",
    "minOffsetsPerTrigger": _LONGER_TRIGGER,
    "maxTriggerDelay": _LONGER_TRIGGER,
    "minPartitions": (
        "s2.records-per-partition: each stream's range is split into Spark partitions of at most that "
        "many records (default 500000)"
    ),
    "maxRecordsPerPartition": "s2.records-per-partition (records per Spark partition)",
    "includeHeaders": "s2.format=kafka (columns key, value and headers, plus the record positions)",
    "groupIdPrefix": _NO_GROUPS,
    "kafka.group.id": _NO_GROUPS,
    "kafka.isolation.level": (
        "s2.isolation=read-committed with s2.committed-by=<writer id> (read_committed), or leave it "
        "unset (read-uncommitted)"
    ),
    "kafka.bootstrap.servers": _CONNECT,
    "kafkaConsumer.pollTimeoutMs": "s2.request-timeout-ms",
    "fetchOffset.numRetries": "s2.max-retries",
    "fetchOffset.retryIntervalMs": "s2.retry-delay-ms",
}
_BY_LOWER: Final = {name.lower(): name for name in KAFKA_OPTIONS}
_KAFKA_CLIENT_PREFIX: Final = "kafka."


def _seq_json(raw: str) -> str | None:
    """Kafka's per-partition offsets JSON as s2's per-stream JSON, when each topic names partition 0 only with
    a real offset (-1/-2 have no per-stream word in s2's JSON)."""
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    out: dict[str, int] = {}
    for topic, parts in parsed.items():
        if not isinstance(parts, dict) or set(parts) != {"0"}:
            return None
        seq = parts["0"]
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            return None
        out[str(topic)] = seq
    return json.dumps(out)


_CARRIES: Final = frozenset(
    {"startingOffsets", "endingOffsets", "subscribe", "subscribePattern", "includeHeaders", "topic"}
    | {"failOnDataLoss", "maxOffsetsPerTrigger", "maxBytesPerTrigger", "maxRecordsPerPartition"}
    | {"startingTimestamp", "endingTimestamp"}
)
"""The Kafka options whose value may carry over, to the s2 option their `KAFKA_OPTIONS` text starts with."""


def _translated_value(name: str, value: str) -> str | None:
    lowered = value.lower()
    if name in ("startingOffsets", "endingOffsets"):
        return lowered if lowered in ("earliest", "latest") else _seq_json(value)
    if name == "subscribe":
        return ",".join(n.strip() for n in value.split(",") if n.strip()) or None
    if name == "subscribePattern":
        # Only a literal prefix followed by ".*" carries over.
        match = re.fullmatch(r"\^?([A-Za-z0-9_/-]+)\.\*\$?", value)
        return match.group(1) if match else None
    if name == "includeHeaders":
        return "kafka" if lowered == "true" else None
    return (lowered if name == "failOnDataLoss" else value) or None


def _translated(name: str, raw: str) -> tuple[str, str] | None:
    """``(s2 option, value)`` when the Kafka value carries over unchanged in meaning."""
    value = _translated_value(name, raw.strip()) if name in _CARRIES else None
    if value is None:
        return None
    option = re.match(r"s2\.[a-z.-]+", KAFKA_OPTIONS[name])
    assert option is not None
    if name == "subscribe" and "," not in value:
        return "s2.stream", value
    return option.group(0), value


def _message(spelled: str, raw: object, fix: str, translated: tuple[str, str] | None) -> str:
    text = f"option {spelled}={str(raw)!r} is a Kafka source option, which format('s2') does not take: "
    if translated is not None:
        option, value = translated
        return text + f"use .option({option!r}, {value!r}) instead ({fix})"
    return text + f"use {fix}"


def refuse_kafka_options(options: Mapping[str, object]) -> None:
    """ConfigError, on the driver, for the first Kafka source option given to a read, naming the s2 option
    (and value) that does its job."""
    opts = OptionMap(options)
    for key in sorted(opts):
        name = _BY_LOWER.get(key)
        if name is None and key.startswith(_KAFKA_CLIENT_PREFIX):
            # Its value is not shown: Kafka client settings hold credentials (kafka.sasl.jaas.config).
            raise ConfigError(
                f"option {opts.spelling(key)} is a Kafka client setting, which format('s2') does not "
                f"take: {_CONNECT}; drop it"
            )
        if name is None and (key.startswith(OUR_PREFIXES) or "-" in key):
            continue  # ours, or spelt like ours (Kafka's names have no hyphens): check_strays' business
        if name is None:
            # A Kafka name misspelt (startingOffset) would otherwise pass as some other source's option.
            close = difflib.get_close_matches(key, list(_BY_LOWER), n=1, cutoff=0.85)
            if not close:
                continue
            name = _BY_LOWER[close[0]]
            raise ConfigError(
                f"unknown option {opts.spelling(key)}={str(opts[key])!r}, close to the Kafka source option "
                f"{name}, which format('s2') does not take either: use {KAFKA_OPTIONS[name]}"
            )
        raw = opts[key]
        raise ConfigError(_message(opts.spelling(key), raw, KAFKA_OPTIONS[name], _translated(name, str(raw))))
