"""Data loss and reader lag of format("s2") streaming reads, against the lite server without Spark.

Records are trimmed with a real trim command record; the lite server applies trims synchronously.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
import s2_sdk

from s2_sink import ConfigError, ReadError
from s2_sink._read import session as _session
from s2_sink._read.partition import S2Partition
from s2_sink._read.planning import lookups as _lookups
from s2_sink._read.planning.data_loss import positions
from s2_sink._read.read_options import parse_read_options
from s2_sink.config import S2Config
from s2_sink.datasource._readers import S2StreamReader, read_partition
from s2_sink.datasource._source import S2DataSource
from s2_sink.lite import LiteServer


def _cfg(endpoint: str, basin: str) -> S2Config:
    return S2Config(basin=basin, account_endpoint=endpoint, basin_endpoint=endpoint)


def _append(endpoint: str, basin: str, stream: str, records: list[s2_sdk.Record]) -> None:
    _appends(endpoint, basin, [(stream, records)])


def _appends(endpoint: str, basin: str, appends: list[tuple[str, list[s2_sdk.Record]]]) -> None:
    """Each (stream, records) appended in turn, on one client (each new client parses the CA bundle)."""

    async def go() -> None:
        s2 = s2_sdk.S2("test", endpoints=s2_sdk.Endpoints(account=endpoint, basin=endpoint))
        async with s2:
            for stream, records in appends:
                await s2.basin(basin).stream(stream).append(s2_sdk.AppendInput(records=records))

    asyncio.run(go())


def _bodies(*texts: str) -> list[s2_sdk.Record]:
    return [s2_sdk.Record(body=t.encode()) for t in texts]


def _trimmed_stream(endpoint: str, basin: str, stream: str) -> None:
    """Records 0..9, then a trim to seq_num 4 (the trim record is seq_num 10): 0..3 are gone."""
    _appends(
        endpoint,
        basin,
        [(stream, _bodies(*(f"r{i}" for i in range(10)))), (stream, [s2_sdk.CommandRecord.trim(4)])],
    )


def _options(endpoint: str, basin: str, **extra: str) -> dict[str, str]:
    return {"s2.basin": basin, "s2.endpoints.account": endpoint, "s2.endpoints.basin": endpoint, **extra}


@pytest.fixture(params=["unary", "session"])
def read_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Small ranges read by unary reads, as a task reads them, or by read sessions, as it reads larger ones:
    a loss is the same loss either way."""
    if request.param == "session":
        monkeypatch.setattr(_session, "UNARY_RECORDS", 0)


def _bodies_read(endpoint: str, basin: str, partition: S2Partition, policy: str) -> list[bytes]:
    source = S2DataSource(_options(endpoint, basin, **{"s2.stream": partition.ranges[0][0]}))
    batches = read_partition(
        _cfg(endpoint, basin),
        "raw",
        source.schema(),
        partition,
        on_loss=policy,  # type: ignore[arg-type]
    )
    return [b for batch in batches for b in batch.column("body").to_pylist()]


@pytest.mark.usefixtures("read_path")
def test_fail_policy_names_the_lost_records_the_stream_and_the_option(lite: LiteServer, basin: str) -> None:
    """Reading a range whose head was trimmed fails with how many records were lost, from which stream and
    basin, and the option that lets the read go on."""
    _trimmed_stream(lite.endpoint, basin, "s")
    with pytest.raises(ReadError) as info:
        _bodies_read(lite.endpoint, basin, S2Partition([("s", 1, 7)]), "fail")
    message = str(info.value)
    assert f"3 records of stream 's' in basin '{basin}' (seq_nums [1, 4))" in message
    assert "were trimmed or expired" in message
    assert "s2.fail-on-data-loss=false" in message


@pytest.mark.usefixtures("read_path")
def test_warn_policy_goes_on_from_the_trim_point_and_logs_the_numbers(
    lite: LiteServer, basin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With the warn policy the read returns the records from the trim point on and logs one WARNING with
    the stream, the basin, the count and the positions as key=value pairs."""
    _trimmed_stream(lite.endpoint, basin, "s")
    with caplog.at_level(logging.WARNING, logger="s2_sink._read.planning.data_loss"):
        got = _bodies_read(lite.endpoint, basin, S2Partition([("s", 1, 7)]), "warn")
    assert got == [b"r4", b"r5", b"r6"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"stream=s basin={basin} lost_records=3 first_lost=1 resumed_at=4" in warnings[0]
    assert "s2.fail-on-data-loss=false" in warnings[0]


@pytest.mark.usefixtures("read_path")
def test_a_range_trimmed_entirely_is_a_loss_of_all_of_it(lite: LiteServer, basin: str) -> None:
    """A range wholly below the trim point counts every one of its records as lost, also when the trim
    reached the tail (the server then answers the read with 416)."""
    _trimmed_stream(lite.endpoint, basin, "s")
    with pytest.raises(ReadError, match=r"2 records of stream 's'.*\[0, 2\)"):
        _bodies_read(lite.endpoint, basin, S2Partition([("s", 0, 2)]), "fail")

    _append(lite.endpoint, basin, "t", _bodies("a", "b", "c"))
    _append(lite.endpoint, basin, "t", [s2_sdk.CommandRecord.trim(100)])  # clamps to the tail: 4
    with pytest.raises(ReadError, match=r"4 records of stream 't'.*\[0, 4\)"):
        _bodies_read(lite.endpoint, basin, S2Partition([("t", 0, 4)]), "fail")


@pytest.mark.usefixtures("read_path")
def test_a_loss_in_a_partition_of_many_streams_names_its_stream(
    lite: LiteServer, basin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """In a partition shared by many small streams, a trimmed head of one of them fails the read naming
    that stream and its lost seq_nums (not a neighbour's); warned, it is logged for that stream alone and
    every other record of the partition is read once."""
    names = [f"m/{i:02d}" for i in range(40)]
    _appends(lite.endpoint, basin, [(name, _bodies(*(f"{name}:{j}" for j in range(3)))) for name in names])
    _trimmed_stream(lite.endpoint, basin, "m/lost")
    partition = S2Partition(
        [*((n, 0, 3) for n in names[:20]), ("m/lost", 1, 7), *((n, 0, 3) for n in names[20:])]
    )
    with pytest.raises(ReadError) as info:
        _bodies_read(lite.endpoint, basin, partition, "fail")
    assert f"3 records of stream 'm/lost' in basin '{basin}' (seq_nums [1, 4))" in str(info.value)
    with caplog.at_level(logging.WARNING, logger="s2_sink._read.planning.data_loss"):
        got = _bodies_read(lite.endpoint, basin, partition, "warn")
    expected = [f"{n}:{j}".encode() for n in names for j in range(3)] + [b"r4", b"r5", b"r6"]
    assert sorted(got) == sorted(expected)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "stream=m/lost" in warnings[0]


@pytest.mark.usefixtures("read_path")
def test_batch_reads_ignore_trimmed_records(lite: LiteServer, basin: str) -> None:
    """The batch reader's policy reads what is retained and raises nothing."""
    _trimmed_stream(lite.endpoint, basin, "s")
    assert _bodies_read(lite.endpoint, basin, S2Partition([("s", 0, 6)]), "ignore") == [b"r4", b"r5"]


def test_first_seqs_is_the_first_stored_record_or_the_tail(lite: LiteServer, basin: str) -> None:
    """first_seqs answers the trim point of a trimmed stream and the tail of an empty one."""
    _trimmed_stream(lite.endpoint, basin, "s")
    _append(lite.endpoint, basin, "full", _bodies("x"))
    _append(lite.endpoint, basin, "gone", _bodies("y"))
    _append(lite.endpoint, basin, "gone", [s2_sdk.CommandRecord.trim(2)])
    assert _lookups.first_seqs(_cfg(lite.endpoint, basin), ["s", "full", "gone"]) == {
        "s": 4,
        "full": 0,
        "gone": 2,
    }


def _stream_reader(endpoint: str, basin: str, **extra: str) -> S2StreamReader:
    source = S2DataSource(_options(endpoint, basin, **extra))
    reader = source.streamReader(source.schema())
    assert isinstance(reader, S2StreamReader)
    return reader


def test_earliest_starts_at_the_first_stored_record(lite: LiteServer, basin: str) -> None:
    """A streaming read from earliest starts at the trim point: records trimmed before the query started
    are not data loss, and the first batch reads with the failing policy without error."""
    _trimmed_stream(lite.endpoint, basin, "s")
    reader = _stream_reader(lite.endpoint, basin, **{"s2.stream": "s", "s2.starting-position": "earliest"})
    start = positions(reader.initialOffset())
    assert start == {"s": 4}
    end = positions(reader.latestOffset())
    assert end == {"s": 11}
    (part,) = reader.partitions(dict(start), dict(end))
    rows = [b for batch in reader.read(part) for b in batch.column("body").to_pylist()]
    assert rows == [f"r{i}".encode() for i in range(4, 10)]


def test_streams_joining_under_a_prefix_start_at_their_first_stored_record(
    lite: LiteServer, basin: str
) -> None:
    """A stream that appears under the prefix after the start is planned from its first stored record, so
    records trimmed before the query saw it are not reported as lost."""
    _append(lite.endpoint, basin, "p/a", _bodies("a0"))
    reader = _stream_reader(lite.endpoint, basin, **{"s2.stream-prefix": "p/"})
    start = positions(reader.initialOffset())
    _trimmed_stream(lite.endpoint, basin, "p/b")
    end = positions(reader.latestOffset())
    assert end == {"p/a": 1, "p/b": 11}
    parts = reader.partitions(dict(start), dict(end))
    assert [r for p in parts for r in p.ranges] == [("p/a", 0, 1), ("p/b", 4, 11)]  # type: ignore[attr-defined]


def test_lag_is_logged_per_planned_batch(
    lite: LiteServer, basin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Each planned batch logs the records left between its end offset and the tails at INFO (key=value);
    an idle poll with an unchanged lag logs nothing."""
    _append(lite.endpoint, basin, "a", _bodies(*(f"a{i}" for i in range(10))))
    _append(lite.endpoint, basin, "b", _bodies("b0", "b1"))
    reader = _stream_reader(lite.endpoint, basin, **{"s2.streams": "a,b", "s2.max-records-per-trigger": "4"})
    reader.initialOffset()
    logger = "s2_sink._read.planning.micro_batches"
    with caplog.at_level(logging.INFO, logger=logger):
        assert positions(reader.latestOffset()) == {"a": 2, "b": 2}
        assert positions(reader.latestOffset()) == {"a": 6, "b": 2}
        assert positions(reader.latestOffset()) == {"a": 10, "b": 2}
        assert positions(reader.latestOffset()) == {"a": 10, "b": 2}
    lines = [r.getMessage() for r in caplog.records if r.name == logger and "planned batch" in r.getMessage()]
    assert len(lines) == 3
    assert "batch_records=4 lag_records=8 streams=2 lag_by_stream={'a': 8}" in lines[0]
    assert "batch_records=4 lag_records=4" in lines[1]
    assert "batch_records=4 lag_records=0 streams=2 lag_by_stream={}" in lines[2]


@pytest.mark.parametrize("value", ["yes", "", "1"])
def test_a_bad_fail_on_data_loss_value_names_the_option_and_the_fix(value: str) -> None:
    """s2.fail-on-data-loss takes true or false; anything else is a ConfigError naming it and the value."""
    with pytest.raises(ConfigError, match=rf"s2\.fail-on-data-loss='{value}' must be true or false"):
        parse_read_options({"s2.stream": "s", "s2.fail-on-data-loss": value}, streaming=True)


def test_fail_on_data_loss_is_parsed_and_refused_on_batch_reads() -> None:
    """The option defaults to true, its value is case-insensitive, and it is refused on spark.read with a
    message saying it applies to readStream only."""
    assert parse_read_options({"s2.stream": "s"}, streaming=True).fail_on_data_loss is True
    off = parse_read_options({"s2.stream": "s", "s2.fail-on-data-loss": "FALSE"}, streaming=True)
    assert off.fail_on_data_loss is False
    with pytest.raises(ConfigError, match=r"s2\.fail-on-data-loss='false' applies to readStream only"):
        parse_read_options({"s2.stream": "s", "s2.fail-on-data-loss": "false"}, streaming=False)
