"""format("s2") planning rules without Spark or a server: reader options, offset capping and range splits."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.types import LongType, StringType, StructField, StructType

from s2_sink._read.planning.offsets import (
    SHARED_RANGE_FRACTION,
    advance,
    cap_total,
    max_merge,
    pack_ranges,
    plan_ranges,
)
from s2_sink._read.read_options import Bound, parse_read_options
from s2_sink._read.rows.schemas import RAW_SCHEMA
from s2_sink.config import S2Config
from s2_sink.datasource import S2DataSource
from s2_sink.datasource._spark_writers import sink_identity
from s2_sink.datasource._write_options import parse_write_options
from s2_sink.errors import CommitError, ConfigError

offsets = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 10_000), max_size=4)


def test_defaults_read_raw_from_earliest_to_latest() -> None:
    """Without position options a read starts at seq_num 0 and ends at the tail, in raw format."""
    o = parse_read_options({"s2.stream": "s"}, streaming=False)
    assert o.streams == ("s",)
    assert o.start == Bound(kind="earliest")
    assert o.end == Bound(kind="latest")
    assert o.format == "raw"


def test_json_positions_and_lists_parse() -> None:
    """A stream list, per-stream JSON start positions and a timestamp end parse into plain values."""
    o = parse_read_options(
        {"s2.streams": "a, b", "s2.starting-position": '{"b": 7}', "s2.ending-timestamp": "123"},
        streaming=False,
    )
    assert o.streams == ("a", "b")
    assert o.start.seq_num_map() == {"b": 7}
    assert o.start.default == "earliest"
    assert o.end == Bound(kind="timestamp", timestamp=123)


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"s2.streams": "a,a"}, False, "names a stream twice"),
        ({"s2.streams": " , "}, False, "names no stream"),
        ({"s2.streams": "a,.."}, False, "s2.streams: stream '..' is not a valid S2 stream name"),
        (
            {"s2.stream": "s", "s2.starting-position": '{"": 1}'},
            False,
            "stream '' is not a valid S2 stream name",
        ),
        ({"s2.stream": "s", "s2.ending-timestamp": "1", "s2.ending-position": "latest"}, False, "exclusive"),
        ({"s2.stream": "s", "s2.fail-on-data-loss": "false"}, False, "readStream only; a batch read"),
        ({"s2.stream": "s", "s2.starting-position": "[1]"}, False, "s2.starting-position='[1]'"),
        ({"s2.stream": "s", "s2.starting-position": "{bad"}, False, "is not valid JSON"),
        ({"s2.stream": "s", "s2.starting-position": '{"s": true}'}, False, "seq_num True"),
        ({"s2.stream": "s", "s2.ending-position": "earliest"}, False, "s2.ending-position='earliest'"),
        ({"s2.stream": "s", "s2.ending-timestamp": "5"}, True, "batch reads only"),
        ({"s2.stream": "s", "s2.max-records-per-trigger": "-3"}, True, "s2.max-records-per-trigger='-3'"),
        ({"s2.stream": "s", "s2.format": "upsert", "s2.upsert-materialize": "yes"}, False, "true or false"),
        (
            {"s2.stream": "s", "s2.format": "upsert", "s2.upsert-materialize": "true"},
            True,
            "batch reads only",
        ),
        (
            {"s2.stream": "s", "s2.starting-position": "latest", "s2.starting-timestamp": "1"},
            False,
            "exclusive",
        ),
    ],
)
def test_bad_reader_options_name_option_and_value(
    options: dict[str, str], streaming: bool, message: str
) -> None:
    """Every rejected reader option raises ConfigError with the option and the offending value."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_read_options(options, streaming=streaming)


def test_cap_shares_the_budget_fairly() -> None:
    """Streams with little new data take all of it; the rest split what remains of the budget."""
    end = cap_total({"a": 0, "b": 0}, {"a": 100, "b": 5, "c": 50}, 30)
    assert end == {"a": 13, "b": 5, "c": 12}


@given(frontier=offsets, target=offsets, limit=st.one_of(st.none(), st.integers(1, 5000)))
def test_cap_never_goes_backwards_nor_past_target_nor_over_budget(
    frontier: dict[str, int], target: dict[str, int], limit: int | None
) -> None:
    """The capped end is between the frontier and the (uncapped) target for every stream, and moves at
    most ``limit`` records in total; with room to spare it reaches the target."""
    goal = advance(frontier, target)
    end = cap_total(frontier, goal, limit)
    moved = 0
    for stream, seq in end.items():
        assert frontier.get(stream, 0) <= seq <= goal.get(stream, frontier.get(stream, 0))
        moved += seq - frontier.get(stream, 0)
    available = sum(goal[s] - frontier.get(s, 0) for s in goal)
    if limit is None or available <= limit:
        assert end == max_merge(frontier, goal)
    else:
        assert moved == limit


@given(start=offsets, end=offsets, per=st.integers(1, 3000))
def test_ranges_tile_each_stream_exactly(start: dict[str, int], end: dict[str, int], per: int) -> None:
    """Planned ranges cover [start, end) of every stream exactly once, each at most ``per`` long."""
    covered: dict[str, int] = {}
    for stream, lo, hi in plan_ranges(start, end, per):
        assert 0 < hi - lo <= per
        assert covered.get(stream, start.get(stream, 0)) == lo
        covered[stream] = hi
    for stream, hi in end.items():
        if hi > start.get(stream, 0):
            assert covered[stream] == hi
        else:
            assert stream not in covered


many_offsets = st.dictionaries(st.from_regex(r"[a-z]{1,3}", fullmatch=True), st.integers(0, 500), max_size=60)


@given(end=many_offsets, per=st.integers(1, 800), most=st.integers(1, 50))
def test_packed_partitions_keep_every_range_once_within_both_bounds(
    end: dict[str, int], per: int, most: int
) -> None:
    """Packing keeps the planned ranges in order, each once, in partitions of at most ``per`` records and
    ``most`` ranges; a range of more than a tenth of ``per`` records is alone, and small ranges never leave
    room for the next small one: a new partition starts only when the range would break a bound."""
    ranges = plan_ranges({}, end, per)
    parts = pack_ranges(ranges, per, max_ranges=most)
    assert [r for part in parts for r in part] == ranges
    sizes = [sum(hi - lo for _, lo, hi in part) for part in parts]
    assert all(part and len(part) <= most and size <= per for part, size in zip(parts, sizes, strict=True))

    def large(rng: tuple[str, int, int]) -> bool:
        return rng[2] - rng[1] > per // SHARED_RANGE_FRACTION

    assert all(len(part) == 1 for part in parts if any(large(r) for r in part))
    for part, size, after in zip(parts, sizes, parts[1:], strict=False):
        _, lo, hi = after[0]
        assert large(part[0]) or large(after[0]) or len(part) == most or size + hi - lo > per


def test_small_streams_share_partitions_and_large_ones_split() -> None:
    """A thousand streams of 100 records fill partitions of ``per`` records; a large stream's pieces stay
    alone, and so does a medium stream (more than a tenth of ``per``), so it reads on a core of its own."""
    small = {f"s{i:04d}": 100 for i in range(1000)}
    assert [len(p) for p in pack_ranges(plan_ranges({}, small, 50_000), 50_000)] == [500, 500]
    assert len(pack_ranges(plan_ranges({}, small, 500_000), 500_000)) == 1
    parts = pack_ranges(plan_ranges({}, {"a": 250, "b": 10, "c": 10}, 100), 100)
    assert parts == [[("a", 0, 100)], [("a", 100, 200)], [("a", 200, 250)], [("b", 0, 10), ("c", 0, 10)]]
    medium = {f"m{i:02d}": 100_000 for i in range(64)}
    assert len(pack_ranges(plan_ranges({}, medium, 500_000), 500_000)) == 64
    smallish = {f"m{i:02d}": 20_000 for i in range(50)}
    assert [len(p) for p in pack_ranges(plan_ranges({}, smallish, 500_000), 500_000)] == [25, 25]


# The data source's driver-side entry points, called directly (Spark calls them while planning).
_BASE = {
    "s2.preflight": "false",  # no server here: the driver's preflight is tested in test_preflight.py
    "s2.basin": "unused-basin",
    "s2.endpoints.account": "http://127.0.0.1:9",
    "s2.endpoints.basin": "http://127.0.0.1:9",
}
_TWO_COLS = StructType([StructField("id", LongType()), StructField("name", StringType())])


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({}, "need one of s2.stream, s2.streams or s2.stream-prefix"),
        ({"s2.stream": "s", "s2.stream-prefix": "p"}, "mutually exclusive"),
        ({"s2.stream": "s", "s2.starting-position": '{"s": -1}'}, "seq_num -1 of stream 's'"),
        ({"s2.stream": "s", "s2.starting-timestamp": "yesterday"}, "s2.starting-timestamp='yesterday'"),
        ({"s2.stream": "s", "s2.format": "avro"}, "s2.format='avro'"),
        ({"s2.stream": "s", "s2.upsert-materialize": "true"}, "needs s2.format=upsert"),
        ({"s2.stream": "s", "s2.max-records-per-trigger": "10"}, "applies to readStream only"),
        ({"s2.stream": "s", "s2.records-per-partition": "0"}, "s2.records-per-partition='0'"),
        ({"s2.stream": "s", "s2.no-such-option": "1"}, "unknown option s2.no-such-option='1'"),
        ({"s2.stream": "s", "S2.Format": "raw", "s2.format": "json"}, "given twice"),
    ],
)
def test_batch_reader_rejects_bad_options(extra: dict[str, str], message: str) -> None:
    """reader() validates every reader option before planning, naming the option and the value."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        S2DataSource({**_BASE, **extra}).reader(RAW_SCHEMA)


@pytest.mark.parametrize(
    ("schema", "fmt", "message"),
    [
        (
            StructType([StructField("nope", StringType())]),
            "raw",
            "column 'nope' is not produced by s2.format=raw",
        ),
        (StructType([StructField("seq_num", StringType())]), "raw", "has type bigint, not string"),
        (
            StructType([StructField("_s2_seq_num", StringType())]),
            "json",
            "'_s2_seq_num' must have type bigint",
        ),
        (StructType([StructField("_s2_action", StringType())]), "json", "only with s2.format=upsert"),
    ],
)
def test_reader_rejects_schemas_the_format_cannot_fill(schema: StructType, fmt: str, message: str) -> None:
    """A user schema the chosen format cannot produce is rejected with the column named."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        S2DataSource({**_BASE, "s2.stream": "s", "s2.format": fmt}).reader(schema)


@pytest.mark.parametrize(
    ("extra", "overwrite", "message"),
    [
        ({"s2.stream": "s", "s2.format": "avro"}, False, "s2.format='avro'"),
        ({"s2.stream": "s", "s2.format": "upsert"}, False, "needs s2.key-columns"),
        (
            {"s2.stream": "s", "s2.format": "json", "s2.key-columns": "id"},
            False,
            "applies to s2.format=upsert",
        ),
        (
            {"s2.stream": "s", "s2.format": "upsert", "s2.key-columns": "id", "s2.key-column": "id"},
            False,
            "upsert keys are s2.key-columns",
        ),
        ({}, False, "no target stream"),
        ({"s2.stream": "s", "s2.stream-column": "name"}, False, "mutually exclusive"),
        ({"s2.stream": "s", "s2.on-error": "dlq"}, False, "needs s2.dlq-stream"),
        ({"s2.stream": "s", "s2.on-error": "maybe"}, False, "s2.on-error='maybe'"),
        ({"s2.stream": "s", "s2.dlq-stream": "d"}, False, "only with s2.on-error=dlq"),
        ({"s2.stream": "s", "s2.delivery": "maybe"}, False, "s2.delivery='maybe'"),
        (
            {"s2.stream": "s", "s2.delivery": "at-least-once", "s2.writer-id": "w"},
            False,
            "only with s2.delivery=exactly-once",
        ),
        ({"s2.stream": "s", "s2.replay-partitioning": "maybe"}, False, "must be check | same"),
        (
            {"s2.stream": "s", "s2.starting-position": "earliest"},
            False,
            "option s2.starting-position='earliest' applies to format('s2') reads",
        ),
        ({"s2.stream": "s", "s2.key-column": "id"}, False, "s2.key-column='id' has no effect"),
        ({"s2.stream": "s", "s2.format": "raw"}, False, "value column 'value'"),
        ({"s2.stream": "s"}, True, "only appends"),
    ],
)
def test_writer_rejects_bad_options(extra: dict[str, str], overwrite: bool, message: str) -> None:
    """writer() and streamWriter() validate options and the input schema before any task runs."""
    source = S2DataSource({**_BASE, **extra})
    with pytest.raises(ConfigError, match=re.escape(message)):
        source.writer(_TWO_COLS, overwrite)
    with pytest.raises(ConfigError, match=re.escape(message)):
        source.streamWriter(_TWO_COLS, overwrite)


def test_option_names_are_case_insensitive_on_both_sides() -> None:
    """Any spelling of an option name is that option, for reads and writes alike (connection options too)."""
    source = S2DataSource(
        {
            "S2.PreFlight": "False",
            "S2.Basin": _BASE["s2.basin"],
            "S2.ENDPOINTS.ACCOUNT": _BASE["s2.endpoints.account"],
            "s2.Endpoints.Basin": _BASE["s2.endpoints.basin"],
            "S2.Stream": "s",
            "s2.Request-Timeout-Ms": "250",
        }
    )
    reader = source.reader(RAW_SCHEMA)
    assert reader is not None
    writer = source.writer(_TWO_COLS, False)
    assert writer is not None
    opts = parse_read_options({"S2.STREAMS": "a,b", "S2.Format": "JSON"}, streaming=False)
    assert (opts.streams, opts.format) == (("a", "b"), "json")


@pytest.mark.parametrize(
    "key",
    ["s2.writer-id", "s2.create-streams", "sink.batch.max-size", "S2.Append-Retry-Policy", "s2.on-error"],
)
def test_a_read_refuses_write_options_naming_the_side(key: str) -> None:
    """A write-only option on a read (format('s2') options or S2Config's append settings) is refused with
    its value: the message says it belongs to writes and that the fix is to drop it."""
    with pytest.raises(ConfigError) as info:
        S2DataSource({**_BASE, "s2.stream": "s", key: "1"}).reader(RAW_SCHEMA)
    assert f"option {key}='1' applies to format('s2') writes" in str(info.value)
    assert "drop it here" in str(info.value)


@pytest.mark.parametrize("key", ["s2.starting-position", "S2.Streams", "s2.fail-on-data-loss"])
def test_a_write_refuses_read_options_naming_the_side(key: str) -> None:
    """A read-only option on a write is refused with its value, saying it belongs to reads."""
    with pytest.raises(ConfigError) as info:
        S2DataSource({**_BASE, "s2.stream": "s", key: "x"}).writer(_TWO_COLS, False)
    assert f"option {key}='x' applies to format('s2') reads" in str(info.value)


@pytest.mark.parametrize(
    ("side", "typo", "meant"),
    [
        ("write", "s2.strem", "s2.stream"),
        ("read", "s2.starting-postion", "s2.starting-position"),
        ("read", "s2.max-record-per-trigger", "s2.max-records-per-trigger"),
        ("read", "s2.failondataloss", "s2.fail-on-data-loss"),
    ],
)
def test_a_misspelt_option_gets_did_you_mean(side: str, typo: str, meant: str) -> None:
    """A misspelt option is called unknown, with its value and the closest key of its side, not the whole
    list of keys."""
    source = S2DataSource({**_BASE, "s2.stream": "s", typo: "x"})
    with pytest.raises(ConfigError) as info:
        source.writer(_TWO_COLS, False) if side == "write" else source.reader(RAW_SCHEMA)
    text = str(info.value)
    assert text.startswith(f"unknown option {typo}='x': did you mean {meant}")
    assert "accept:" not in text


def test_an_unknown_option_like_no_key_lists_the_keys_of_its_side() -> None:
    """An unknown option close to no key lists the keys of the side it was given to."""
    pattern = r"unknown option s2\.zzzzzz='x'\. format\('s2'\) writes .* accept: .*s2\.writer-id"
    with pytest.raises(ConfigError, match=pattern):
        S2DataSource({**_BASE, "s2.stream": "s", "s2.zzzzzz": "x"}).writer(_TWO_COLS, False)


def test_spark_options_outside_our_namespaces_are_ignored() -> None:
    """Options Spark adds itself (checkpointLocation, path) do not trip the unknown-option check."""
    source = S2DataSource({**_BASE, "s2.stream": "s", "checkpointLocation": "/tmp/x", "path": "p"})
    assert source.writer(_TWO_COLS, False) is not None
    assert source.reader(RAW_SCHEMA) is not None


def test_exactly_once_write_options_and_identity(tmp_path: Path) -> None:
    """Streaming writes are exactly-once by default, with the query id read from the checkpoint's metadata
    (or s2.writer-id) as the writer identity; a batch write refuses exactly-once; an identity that cannot
    be resolved on the driver fails there, naming the option to set."""
    eo = {**_BASE, "s2.stream": "s"}
    with pytest.raises(ConfigError, match=r"one-off df\.write"):
        S2DataSource({**eo, "s2.delivery": "exactly-once"}).writer(_TWO_COLS, False)
    with pytest.raises(ConfigError, match="no checkpointLocation") as info:
        S2DataSource(eo).streamWriter(_TWO_COLS, False)
    assert "s2.writer-id" in str(info.value)
    with pytest.raises(ConfigError, match="not readable from the driver"):
        S2DataSource({**eo, "checkpointLocation": "s3a://bucket/ck"}).streamWriter(_TWO_COLS, False)
    with pytest.raises(ConfigError, match="writer_id must be"):
        S2DataSource({**eo, "s2.writer-id": "not ok!"}).streamWriter(_TWO_COLS, False)

    ck = tmp_path / "ck"
    ck.mkdir()
    (ck / "metadata").write_text('{"id":"8d1a6f6e-query"}\n')
    cfg = S2Config.from_options({**_BASE, "s2.stream": "s"}, ignore=["s2.preflight"])
    opts = parse_write_options({"s2.stream": "s"}, cfg=cfg, streaming=True)
    assert opts.spec.delivery == "exactly-once"
    assert sink_identity(opts, ck.as_uri()) == ("8d1a6f6e-query", "8d1a6f6e-query")
    assert sink_identity(opts, str(ck)) == ("8d1a6f6e-query", "8d1a6f6e-query")
    named = parse_write_options({"s2.writer-id": "orders-v2"}, cfg=cfg, streaming=True)
    assert sink_identity(named, None) == ("orders-v2", None)
    assert sink_identity(named, str(ck)) == ("orders-v2", "8d1a6f6e-query")  # recorded in the ledger
    assert parse_write_options({}, cfg=cfg, streaming=False).spec.delivery == "at-least-once"


def test_exactly_once_writer_never_falls_back_to_at_least_once() -> None:
    """A streaming writer that reaches a task without the epoch its driver-side pickling opens (a runtime
    that ships the writer differently) refuses to write instead of writing at-least-once."""
    source = S2DataSource({**_BASE, "s2.stream": "s", "s2.writer-id": "w"})
    writer = source.streamWriter(_TWO_COLS, False)
    with pytest.raises(CommitError, match="without an opened epoch"):
        writer.write(iter([]))  # type: ignore[arg-type]
