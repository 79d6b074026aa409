"""Reader options of ``format("s2")``, parsed and validated on the driver (connection options are
``S2Config.from_options``').
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from s2_sink._option_map import OptionMap, parse_bool
from s2_sink._stream_names import shown, stream_name_problem
from s2_sink.errors import ConfigError

__all__ = [
    "OPT_COMMITTED_BY",
    "OPT_ENDING_POSITION",
    "OPT_ENDING_TIMESTAMP",
    "OPT_FAIL_ON_DATA_LOSS",
    "OPT_FORMAT",
    "OPT_ISOLATION",
    "OPT_MATERIALIZE",
    "OPT_MAX_BYTES_PER_TRIGGER",
    "OPT_MAX_RECORDS_PER_TRIGGER",
    "OPT_RECORDS_PER_PARTITION",
    "OPT_STARTING_POSITION",
    "OPT_STARTING_TIMESTAMP",
    "OPT_STREAM",
    "OPT_STREAMS",
    "OPT_STREAM_PREFIX",
    "READ_FORMATS",
    "Bound",
    "ReadFormat",
    "ReadOptions",
    "parse_read_options",
    "read_format",
]

OPT_STREAM = "s2.stream"
OPT_STREAMS = "s2.streams"
OPT_STREAM_PREFIX = "s2.stream-prefix"
OPT_STARTING_POSITION = "s2.starting-position"
OPT_STARTING_TIMESTAMP = "s2.starting-timestamp"
OPT_ENDING_POSITION = "s2.ending-position"
OPT_ENDING_TIMESTAMP = "s2.ending-timestamp"
OPT_FORMAT = "s2.format"
OPT_MATERIALIZE = "s2.upsert-materialize"
OPT_MAX_RECORDS_PER_TRIGGER = "s2.max-records-per-trigger"
OPT_MAX_BYTES_PER_TRIGGER = "s2.max-bytes-per-trigger"
OPT_RECORDS_PER_PARTITION = "s2.records-per-partition"
OPT_FAIL_ON_DATA_LOSS = "s2.fail-on-data-loss"
OPT_ISOLATION = "s2.isolation"
OPT_COMMITTED_BY = "s2.committed-by"
OPT_PREFLIGHT = "s2.preflight"
"""`_transport.preflight.OPT_PREFLIGHT`, spelled out: that module loads the S2 SDK, which creating the source
does not need."""

ReadFormat = Literal["raw", "json", "upsert", "kafka"]
READ_FORMATS: tuple[ReadFormat, ...] = ("raw", "json", "upsert", "kafka")
DEFAULT_RECORDS_PER_PARTITION = 500_000


@dataclass(frozen=True, kw_only=True)
class Bound:
    """A start or end position for every stream.

    kind: ``earliest`` (seq_num 0), ``latest`` (the tail), ``seq_nums`` (per-stream seq_num; streams not
    named use ``default``) or ``timestamp`` (the first record whose timestamp is >= ``timestamp`` ms).
    """

    kind: Literal["earliest", "latest", "seq_nums", "timestamp"]
    seq_nums: tuple[tuple[str, int], ...] = ()
    timestamp: int | None = None
    default: Literal["earliest", "latest"] = "earliest"

    def seq_num_map(self) -> dict[str, int]:
        return dict(self.seq_nums)


@dataclass(frozen=True, kw_only=True)
class ReadOptions:
    """Validated reader options (plain data: pickles to executors and to the streaming planner)."""

    streams: tuple[str, ...] = ()
    stream_prefix: str | None = None
    start: Bound
    end: Bound
    format: ReadFormat = "raw"
    materialize: bool = False
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    """Streaming reads: metered bytes per micro-batch (at least one record, so the query always moves)."""
    records_per_partition: int = DEFAULT_RECORDS_PER_PARTITION
    fail_on_data_loss: bool = True
    """Streaming reads: fail when the next records were trimmed or expired (else skip them with a warning)."""
    committed_by: str | None = None
    """``s2.isolation=read-committed``: the exactly-once writer id whose latest commit bounds every read
    (None: read-uncommitted, up to the tails)."""


def _int(name: str, raw: str, *, least: int, what: str) -> int:
    """The integer option `name`, at least `least`; ConfigError saying it must be `what`."""
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"option {name}={raw!r} must be {what}") from None
    if value < least:
        raise ConfigError(f"option {name}={raw!r} must be {what}")
    return value


def _positive_int(options: OptionMap, name: str) -> int | None:
    raw = options.text(name)
    return None if raw is None else _int(name, raw, least=1, what="a positive integer")


def _check_stream_name(option: str, name: str) -> str:
    problem = stream_name_problem(name)
    if problem is not None:
        raise ConfigError(f"option {option}: stream {shown(name)} {problem}")
    return name


def _parse_streams(options: OptionMap) -> tuple[tuple[str, ...], str | None]:
    stream = options.text(OPT_STREAM)
    streams = options.text(OPT_STREAMS)
    prefix = options.text(OPT_STREAM_PREFIX)
    given = [
        name
        for name, value in ((OPT_STREAM, stream), (OPT_STREAMS, streams), (OPT_STREAM_PREFIX, prefix))
        if value is not None
    ]
    if not given:
        raise ConfigError(
            f"format('s2') reads need one of {OPT_STREAM}, {OPT_STREAMS} or {OPT_STREAM_PREFIX}"
        )
    if len(given) > 1:
        raise ConfigError(f"options {' and '.join(given)} are mutually exclusive: set only one")
    if stream is not None:
        return (_check_stream_name(OPT_STREAM, stream.strip()),), None
    if streams is not None:
        names = [s.strip() for s in streams.split(",") if s.strip()]
        if not names:
            raise ConfigError(f"option {OPT_STREAMS}={streams!r} names no stream")
        if len(set(names)) != len(names):
            raise ConfigError(f"option {OPT_STREAMS}={streams!r} names a stream twice")
        return tuple(_check_stream_name(OPT_STREAMS, n) for n in names), None
    assert prefix is not None
    if "\x00" in prefix:
        raise ConfigError(f"option {OPT_STREAM_PREFIX}={prefix!r} must not contain NUL")
    return (), prefix


def _parse_position(
    option: str,
    raw: str,
    allowed: tuple[Literal["earliest", "latest"], ...],
    default: Literal["earliest", "latest"],
) -> Bound:
    text = raw.strip()
    lowered = text.lower()
    if lowered in allowed:
        return Bound(kind=lowered)  # narrowed to a Literal by the membership test
    if not text.startswith("{"):
        words = " | ".join(allowed)
        raise ConfigError(
            f"option {option}={raw!r} must be {words} or a JSON object of per-stream seq_nums, "
            'e.g. {"orders/0": 42}'
        )
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option {option}={raw!r} is not valid JSON: {exc.msg}") from None
    if not isinstance(parsed, dict):
        raise ConfigError(f"option {option}={raw!r} must be a JSON object of stream -> seq_num")
    pairs: list[tuple[str, int]] = []
    for stream, seq in sorted(parsed.items()):
        if isinstance(seq, bool) or not isinstance(seq, int) or seq < 0:
            raise ConfigError(
                f"option {option}: seq_num {seq!r} of stream {stream!r} must be an integer >= 0"
            )
        pairs.append((_check_stream_name(option, stream), seq))
    return Bound(kind="seq_nums", seq_nums=tuple(pairs), default=default)


def _parse_isolation(options: OptionMap) -> str | None:
    """The writer id of a read-committed read, None for read-uncommitted."""
    raw = options.text(OPT_ISOLATION)
    level = (raw or "read-uncommitted").strip().lower()
    if level not in ("read-uncommitted", "read-committed"):
        raise ConfigError(
            f"option {OPT_ISOLATION}={raw!r} must be read-uncommitted (the default) or read-committed"
        )
    by = options.text(OPT_COMMITTED_BY)
    if level == "read-uncommitted":
        if by is not None:
            raise ConfigError(
                f"option {OPT_COMMITTED_BY}={by!r} applies only with {OPT_ISOLATION}=read-committed: "
                f"set that too, or drop {OPT_COMMITTED_BY}"
            )
        return None
    if by is None or not by.strip():
        raise ConfigError(
            f"option {OPT_ISOLATION}=read-committed needs {OPT_COMMITTED_BY}=<writer id>: the writer_id "
            "of the exactly-once writer whose commits bound the read (S2Writer(writer_id=...) or "
            "s2.writer-id; by default the writing query's streaming query id)"
        )
    # Imported here: read tasks unpickle ReadOptions, and need none of the exactly-once ledger.
    from s2_sink._exactly_once.identity import validate_writer_id  # noqa: PLC0415
    from s2_sink._exactly_once.ledger import LEDGER_PREFIX  # noqa: PLC0415

    # The ledger stream's name is accepted too: it is what a stream listing shows.
    writer_id = by.strip().removeprefix(LEDGER_PREFIX)
    try:
        return validate_writer_id(writer_id)
    except ConfigError as exc:
        raise ConfigError(f"option {OPT_COMMITTED_BY}={by!r}: {exc}") from None


def _bound(
    options: OptionMap,
    position: str,
    timestamp: str,
    allowed: tuple[Literal["earliest", "latest"], ...],
    default: Literal["earliest", "latest"],
) -> Bound:
    """A start or end from its position or timestamp option (at most one of them), else `default`."""
    pos, ts = options.text(position), options.text(timestamp)
    if pos is not None and ts is not None:
        raise ConfigError(f"options {position} and {timestamp} are mutually exclusive")
    if ts is not None:
        ms = _int(timestamp, ts, least=0, what="milliseconds since the Unix epoch (an integer >= 0)")
        return Bound(kind="timestamp", timestamp=ms)
    if pos is not None:
        return _parse_position(position, pos, allowed, default)
    return Bound(kind=default)


def _check_side(options: OptionMap, *, streaming: bool) -> None:
    """Refuse an option of batch reads in a streaming read, and one of streaming reads in a batch read."""
    batch_bound = f"bound a batch read with {OPT_ENDING_POSITION} or {OPT_ENDING_TIMESTAMP}"
    retained = "a batch read (spark.read) reads what is retained between its bounds"
    for name, batch_only, instead in (
        (OPT_ENDING_POSITION, True, ""),
        (OPT_ENDING_TIMESTAMP, True, ""),
        (OPT_MAX_RECORDS_PER_TRIGGER, False, batch_bound),
        (OPT_MAX_BYTES_PER_TRIGGER, False, batch_bound),
        (OPT_FAIL_ON_DATA_LOSS, False, retained),
    ):
        if (value := options.text(name)) is None or batch_only != streaming:
            continue
        if batch_only:
            raise ConfigError(
                f"option {name}={value!r} applies to batch reads only (spark.read), not readStream"
            )
        raise ConfigError(f"option {name}={value!r} applies to readStream only; {instead}")


def read_format(options: OptionMap) -> ReadFormat:
    """The ``s2.format`` of a read (the source's schema needs it before the other options are parsed)."""
    raw = options.text(OPT_FORMAT)
    fmt = (raw or "raw").strip().lower()
    if fmt not in READ_FORMATS:
        raise ConfigError(f"option {OPT_FORMAT}={raw!r} must be one of {' | '.join(READ_FORMATS)}")
    return fmt


def parse_read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Validate the reader options; raise ConfigError naming the option and the bad value."""
    options = OptionMap(options)
    streams, prefix = _parse_streams(options)

    fmt = read_format(options)
    start = _bound(options, OPT_STARTING_POSITION, OPT_STARTING_TIMESTAMP, ("earliest", "latest"), "earliest")
    _check_side(options, streaming=streaming)
    # Streams an ending JSON does not name are read up to their tail.
    end = _bound(options, OPT_ENDING_POSITION, OPT_ENDING_TIMESTAMP, ("latest",), "latest")

    mat_raw = options.text(OPT_MATERIALIZE)
    materialize = mat_raw is not None and parse_bool(OPT_MATERIALIZE, mat_raw)
    if materialize and fmt != "upsert":
        raise ConfigError(f"option {OPT_MATERIALIZE}=true needs {OPT_FORMAT}=upsert, not {fmt!r}")
    if materialize and streaming:
        raise ConfigError(f"option {OPT_MATERIALIZE}=true applies to batch reads only (spark.read)")

    per_part = _positive_int(options, OPT_RECORDS_PER_PARTITION)
    fail_raw = options.text(OPT_FAIL_ON_DATA_LOSS)
    return ReadOptions(
        streams=streams,
        stream_prefix=prefix,
        start=start,
        end=end,
        format=fmt,
        materialize=materialize,
        max_records_per_trigger=_positive_int(options, OPT_MAX_RECORDS_PER_TRIGGER),
        max_bytes_per_trigger=_positive_int(options, OPT_MAX_BYTES_PER_TRIGGER),
        records_per_partition=DEFAULT_RECORDS_PER_PARTITION if per_part is None else per_part,
        fail_on_data_loss=fail_raw is None or parse_bool(OPT_FAIL_ON_DATA_LOSS, fail_raw),
        committed_by=_parse_isolation(options),
    )
