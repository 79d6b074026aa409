"""The ``format("s2")`` options a read or a write refuses, on the driver, each in words that say what to use
instead: another side's option (users often keep one option dict) naming the side it belongs to, a typo the
closest keys, a Kafka source option the s2 option (and value) that does its job (docs/kafka-options.md).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from typing import Final, Literal

from s2_sink._option_map import OptionMap
from s2_sink._read import read_options
from s2_sink.config import OPTION_KEYS, WRITE_ONLY_OPTION_KEYS
from s2_sink.datasource._write_keys import WRITE_KEYS
from s2_sink.errors import ConfigError

__all__ = ["KAFKA_OPTIONS", "OUR_PREFIXES", "READ_KEYS", "check_side", "check_strays", "refuse_kafka_options"]

Side = Literal["read", "write"]

OUR_PREFIXES: Final = ("s2.", "sink.")
"""Spark adds options of its own (checkpointLocation, path, ...); only these namespaces are ours to check."""

_WHAT: Final[dict[Side, str]] = {
    "read": "reads (spark.read / spark.readStream .format('s2'))",
    "write": "writes (df.write / df.writeStream .format('s2'))",
}


READ_KEYS: Final = frozenset(v for name, v in vars(read_options).items() if name.startswith("OPT_"))
"""Options the reader parses itself (every OPT_ of read_options); any other must be a connection option."""


def _accepted(side: Side) -> frozenset[str]:
    """Every key a ``format("s2")`` read or write accepts: its own and the connection keys (a read leaves out
    those that only shape appends)."""
    connection = frozenset(OPTION_KEYS)
    if side == "read":
        return READ_KEYS | (connection - WRITE_ONLY_OPTION_KEYS)
    return WRITE_KEYS | connection


def check_side(options: Mapping[str, str], side: Side) -> None:
    """Refuse any of our options (``s2.*``, ``sink.*``) this side does not accept, saying which side it
    belongs to, or the closest accepted keys."""
    opts, mine = OptionMap(options), _accepted(side)
    other: Side = "write" if side == "read" else "read"
    for key in sorted(opts):
        if not key.startswith(OUR_PREFIXES) or key in mine:
            continue
        spelled = f"{opts.spelling(key)}={str(opts[key])!r}"
        if key in _accepted(other):
            raise ConfigError(
                f"option {spelled} applies to format('s2') {_WHAT[other]} only, not to {side}s: drop it here"
            )
        close = " or ".join(difflib.get_close_matches(key, sorted(mine), n=3, cutoff=0.6))
        raise ConfigError(
            f"unknown option {spelled}: did you mean {close}?"
            if close
            else f"unknown option {spelled}. format('s2') {_WHAT[side]} accept: {', '.join(sorted(mine))}"
        )


def check_strays(options: Mapping[str, str], side: Side) -> None:
    """Refuse an option outside our namespaces that is one of ours misspelt (``s2_stream``,
    ``stream-prefix``); Spark's own options, and anything not close to ours (other sources' options may share
    the map), pass."""
    opts = OptionMap(options)
    mine = _accepted(side)
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


def _position(raw: str) -> str | None:
    """earliest/latest, or Kafka's per-partition offsets JSON as s2's per-stream JSON when each topic names
    partition 0 only with a real offset (-1/-2 have no per-stream word in s2's JSON)."""
    if raw.lower() in ("earliest", "latest"):
        return raw.lower()
    try:
        parsed = json.loads(raw)
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or any(
        not isinstance(p, dict) or set(p) != {"0"} for p in parsed.values()
    ):
        return None
    out = {str(topic): parts["0"] for topic, parts in parsed.items()}
    return json.dumps(out) if all(type(seq) is int and seq >= 0 for seq in out.values()) else None


def _prefix(pattern: str) -> str | None:
    match = re.fullmatch(r"\^?([A-Za-z0-9_/-]+)\.\*\$?", pattern)  # only a literal prefix then ".*" carries
    return match.group(1) if match else None


_SAME: Final = ("topic", "maxOffsetsPerTrigger", "maxBytesPerTrigger", "maxRecordsPerPartition")
# Kafka option -> its value for the s2 option its `KAFKA_OPTIONS` text starts with (None: it does not carry).
_CARRIES: Final[dict[str, Callable[[str], str | None]]] = {
    "startingOffsets": _position,
    "endingOffsets": _position,
    "subscribe": lambda names: ",".join(n.strip() for n in names.split(",") if n.strip()) or None,
    "subscribePattern": _prefix,
    "includeHeaders": lambda flag: "kafka" if flag.lower() == "true" else None,
    "failOnDataLoss": lambda flag: flag.lower() or None,
    **dict.fromkeys((*_SAME, "startingTimestamp", "endingTimestamp"), lambda value: value or None),
}


def _use(name: str, raw: str) -> str:
    """What to use instead of Kafka option `name`: with its value where that carries over unchanged in
    meaning."""
    carry = _CARRIES.get(name)
    value = carry(raw.strip()) if carry is not None else None
    option = re.match(r"s2\.[a-z.-]+", KAFKA_OPTIONS[name])
    if value is None or option is None:
        return f"use {KAFKA_OPTIONS[name]}"
    s2 = "s2.stream" if name == "subscribe" and "," not in value else option.group(0)
    return f"use .option({s2!r}, {value!r}) instead ({KAFKA_OPTIONS[name]})"


def refuse_kafka_options(options: Mapping[str, object]) -> None:
    """ConfigError for the first Kafka source option given to a read, naming the s2 option (and value) that
    does its job."""
    opts = OptionMap(options)
    for key in sorted(opts):
        spelled = f"{opts.spelling(key)}={str(opts[key])!r}"
        if key in _BY_LOWER:
            use = _use(_BY_LOWER[key], str(opts[key]))
            raise ConfigError(
                f"option {spelled} is a Kafka source option, which format('s2') does not take: {use}"
            )
        if key.startswith(_KAFKA_CLIENT_PREFIX):
            # Its value is not shown: Kafka client settings hold credentials (kafka.sasl.jaas.config).
            raise ConfigError(
                f"option {opts.spelling(key)} is a Kafka client setting, which format('s2') does not take: "
                f"{_CONNECT}; drop it"
            )
        # A Kafka name misspelt (startingOffset) would otherwise pass as another source's option; ours, or
        # spelt like ours (Kafka's names have no hyphens), are check_strays' business.
        if key.startswith(OUR_PREFIXES) or "-" in key:
            continue
        for name in difflib.get_close_matches(key, list(_BY_LOWER), n=1, cutoff=0.85):
            raise ConfigError(
                f"unknown option {spelled}, close to the Kafka source option {_BY_LOWER[name]}, which "
                f"format('s2') does not take either: use {KAFKA_OPTIONS[_BY_LOWER[name]]}"
            )
