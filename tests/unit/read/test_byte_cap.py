"""s2.max-bytes-per-trigger: the streaming planner caps each micro-batch by metered bytes (lite server, no
Spark). A record with a 92-byte body and no headers meters 100 bytes."""

from __future__ import annotations

import asyncio

import pytest
import s2_sdk

from s2_sink import ConfigError
from s2_sink._read.planning.data_loss import positions
from s2_sink._read.read_options import parse_read_options
from s2_sink.datasource._readers import S2StreamReader
from s2_sink.datasource._source import S2DataSource
from s2_sink.lite import LiteServer


def _append(endpoint: str, basin: str, stream: str, sizes: list[int]) -> None:
    """One record per size, each metering exactly that many bytes."""

    async def go() -> None:
        s2 = s2_sdk.S2("test", endpoints=s2_sdk.Endpoints(account=endpoint, basin=endpoint))
        async with s2:
            records = [s2_sdk.Record(body=b"x" * (n - 8)) for n in sizes]
            await s2.basin(basin).stream(stream).append(s2_sdk.AppendInput(records=records))

    asyncio.run(go())


def _reader(endpoint: str, basin: str, **extra: str) -> S2StreamReader:
    options = {"s2.basin": basin, "s2.endpoints.account": endpoint, "s2.endpoints.basin": endpoint, **extra}
    source = S2DataSource(options)
    reader = source.streamReader(source.schema())
    assert isinstance(reader, S2StreamReader)
    reader.initialOffset()
    return reader


def _ends(reader: S2StreamReader, stream: str, n: int) -> list[int]:
    return [positions(reader.latestOffset())[stream] for _ in range(n)]


def test_batches_end_after_the_last_record_that_fits(lite: LiteServer, basin: str) -> None:
    """With 250 bytes per trigger and 100-byte records every batch takes two records until none is left."""
    _append(lite.endpoint, basin, "s", [100] * 5)
    reader = _reader(lite.endpoint, basin, **{"s2.stream": "s", "s2.max-bytes-per-trigger": "250"})
    assert _ends(reader, "s", 4) == [2, 4, 5, 5]


def test_a_record_larger_than_the_cap_is_read_alone(lite: LiteServer, basin: str) -> None:
    """A record bigger than the byte cap still makes progress: one record per batch."""
    _append(lite.endpoint, basin, "s", [1000, 1000, 50])
    reader = _reader(lite.endpoint, basin, **{"s2.stream": "s", "s2.max-bytes-per-trigger": "100"})
    assert _ends(reader, "s", 4) == [1, 2, 3, 3]


def test_whichever_cap_comes_first_applies(lite: LiteServer, basin: str) -> None:
    """The record cap and the byte cap together: the tighter one ends each batch."""
    _append(lite.endpoint, basin, "s", [100] * 6)
    by_records = _reader(
        lite.endpoint,
        basin,
        **{"s2.stream": "s", "s2.max-records-per-trigger": "1", "s2.max-bytes-per-trigger": "1000"},
    )
    assert _ends(by_records, "s", 3) == [1, 2, 3]
    by_bytes = _reader(
        lite.endpoint,
        basin,
        **{"s2.stream": "s", "s2.max-records-per-trigger": "10", "s2.max-bytes-per-trigger": "300"},
    )
    assert _ends(by_bytes, "s", 3) == [3, 6, 6]


def test_streams_share_the_byte_budget(lite: LiteServer, basin: str) -> None:
    """Two streams with new records split the budget; what one does not use goes to the other."""
    _append(lite.endpoint, basin, "a", [100] * 3)
    _append(lite.endpoint, basin, "b", [100] * 3)
    _append(lite.endpoint, basin, "c", [50])
    reader = _reader(lite.endpoint, basin, **{"s2.streams": "a,b", "s2.max-bytes-per-trigger": "400"})
    assert positions(reader.latestOffset()) == {"a": 2, "b": 2}
    assert positions(reader.latestOffset()) == {"a": 3, "b": 3}
    small = _reader(lite.endpoint, basin, **{"s2.streams": "c,a", "s2.max-bytes-per-trigger": "350"})
    # a (first by name) takes its share of 175 (one record); c uses 50 of the rest.
    assert positions(small.latestOffset()) == {"a": 1, "c": 1}


def _trim(endpoint: str, basin: str, stream: str, to: int) -> None:
    """Append a trim command record (its trim point is capped just after itself)."""

    async def go() -> None:
        s2 = s2_sdk.S2("test", endpoints=s2_sdk.Endpoints(account=endpoint, basin=endpoint))
        async with s2:
            trim = s2_sdk.AppendInput(records=[s2_sdk.CommandRecord.trim(to)])
            await s2.basin(basin).stream(stream).append(trim)

    asyncio.run(go())


def test_a_stream_trimmed_past_all_its_records_is_spanned_in_one_batch(lite: LiteServer, basin: str) -> None:
    """Everything from the frontier on was trimmed: S2 answers the byte-capped read below the trim point with
    no records (200, not 416: s2-lite lite/src/backend/read.rs, read_start_seq_num), and the planner spans
    the whole gap in one micro-batch (its task reports the loss) instead of one seq_num per micro-batch."""
    _append(lite.endpoint, basin, "s", [100] * 5)
    reader = _reader(lite.endpoint, basin, **{"s2.stream": "s", "s2.max-bytes-per-trigger": "250"})
    _trim(lite.endpoint, basin, "s", 1000)  # the trim record is seq_num 5: the trim point is 6, the tail
    assert _ends(reader, "s", 2) == [6, 6]


def test_a_stream_trimmed_partway_spans_the_gap_and_meters_what_is_left(lite: LiteServer, basin: str) -> None:
    """Records trimmed from the frontier on cost nothing: a batch spans the gap and takes what fits after it;
    when the first record kept is larger than the cap, the gap alone is one batch and that record the next."""
    _append(lite.endpoint, basin, "s", [100] * 10)
    reader = _reader(lite.endpoint, basin, **{"s2.stream": "s", "s2.max-bytes-per-trigger": "250"})
    _trim(lite.endpoint, basin, "s", 6)
    assert _ends(reader, "s", 2) == [8, 11]  # 8, 9 and the 22-byte trim record fit in 250
    _append(lite.endpoint, basin, "big", [100, 100, 100, 1000])
    big = _reader(lite.endpoint, basin, **{"s2.stream": "big", "s2.max-bytes-per-trigger": "250"})
    _trim(lite.endpoint, basin, "big", 3)  # the trim record (22 bytes) is seq_num 4
    assert _ends(big, "big", 4) == [3, 4, 5, 5]


@pytest.mark.parametrize("value", ["0", "-1", "1MB", ""])
def test_a_bad_byte_cap_names_the_option_and_the_value(value: str) -> None:
    """s2.max-bytes-per-trigger takes a positive integer; anything else is a ConfigError naming it."""
    with pytest.raises(ConfigError, match=rf"s2\.max-bytes-per-trigger='{value}' must be a positive integer"):
        parse_read_options({"s2.stream": "s", "s2.max-bytes-per-trigger": value}, streaming=True)


def test_the_byte_cap_is_refused_on_batch_reads() -> None:
    """On spark.read the option is refused with a message pointing at the batch bounds."""
    with pytest.raises(ConfigError, match=r"applies to readStream only; bound a batch read with s2\.ending"):
        parse_read_options({"s2.stream": "s", "s2.max-bytes-per-trigger": "10"}, streaming=False)
