"""A stream deleted and created again under a streaming read: the format("s2") stream reader, driven as
Spark drives it (offsets pass through JSON as in the offset log), against the lite server without Spark."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest
import s2_sdk

from s2_sink._read.partition import S2Partition
from s2_sink._read.planning.data_loss import EPOCHS_KEY, join, positions, recreated, split
from s2_sink.datasource._readers import S2StreamReader
from s2_sink.datasource._source import S2DataSource
from s2_sink.errors import ReadError
from s2_sink.lite import LiteServer


def _client(endpoint: str) -> s2_sdk.S2:
    return s2_sdk.S2("test", endpoints=s2_sdk.Endpoints(account=endpoint, basin=endpoint))


def _append(endpoint: str, basin: str, stream: str, n: int) -> None:
    async def go() -> None:
        async with _client(endpoint) as s2:
            records = [s2_sdk.Record(body=f"r{i}".encode()) for i in range(n)]
            await s2.basin(basin).stream(stream).append(s2_sdk.AppendInput(records=records))

    asyncio.run(go())


def _recreate(endpoint: str, basin: str, stream: str) -> None:
    async def go() -> None:
        async with _client(endpoint) as s2:
            await s2.basin(basin).delete_stream(stream)
            for _ in range(100):
                try:
                    await s2.basin(basin).create_stream(stream)
                    return
                except s2_sdk.S2ServerError:
                    await asyncio.sleep(0.1)
            raise AssertionError("could not create the stream again")

    asyncio.run(go())


def _reader(endpoint: str, basin: str, **extra: str) -> S2StreamReader:
    options = {"s2.basin": basin, "s2.endpoints.account": endpoint, "s2.endpoints.basin": endpoint, **extra}
    source = S2DataSource(options)
    reader = source.streamReader(source.schema())
    assert isinstance(reader, S2StreamReader)
    return reader


def _logged(offset: dict[str, object]) -> dict[str, object]:
    """An offset as Spark hands it back: written to the offset log as JSON and parsed again."""
    parsed: dict[str, object] = json.loads(json.dumps(offset))
    return parsed


def _restarted(endpoint: str, basin: str, checkpointed: dict[str, object], **extra: str) -> S2StreamReader:
    """A new reader that resumed from ``checkpointed`` as Spark resumes one (the last batch planned again)."""
    reader = _reader(endpoint, basin, **{"s2.stream": "x", **extra})
    reader.partitions(_logged(checkpointed), _logged(checkpointed))
    return reader


def _read_to_tail(endpoint: str, basin: str) -> dict[str, object]:
    reader = _reader(endpoint, basin, **{"s2.stream": "x"})
    start = reader.initialOffset()
    end = reader.latestOffset()
    assert positions(end) == {"x": 5}
    assert positions(start) == {"x": 0}
    return end


def test_offsets_carry_the_stream_creation_time(lite: LiteServer, basin: str) -> None:
    """Every offset names each stream's creation time under the key no stream can have, and survives JSON."""
    _append(lite.endpoint, basin, "x", 5)
    end = _read_to_tail(lite.endpoint, basin)
    assert list(end) == [EPOCHS_KEY, "x"]
    assert split(_logged(end)) == ({"x": 5}, {"x": end[EPOCHS_KEY]["x"]})  # type: ignore[index]


def test_a_recreated_stream_with_the_same_tail_fails_the_next_plan(lite: LiteServer, basin: str) -> None:
    """Deleted, created again and given as many records as were read: positions alone look unchanged, the
    creation time does not; the next plan fails naming the stream, the offsets and the option."""
    _append(lite.endpoint, basin, "x", 5)
    end = _read_to_tail(lite.endpoint, basin)
    _recreate(lite.endpoint, basin, "x")
    _append(lite.endpoint, basin, "x", 5)
    reader = _restarted(lite.endpoint, basin, end)
    with pytest.raises(ReadError) as info:
        reader.latestOffset()
    text = str(info.value)
    assert f"stream 'x' in basin '{basin}' was created again" in text
    assert "the checkpointed offset is seq_num 5, the stream's tail is 5" in text
    assert "s2.fail-on-data-loss=false" in text
    assert "checkpointLocation" in text


def test_told_to_go_on_the_new_stream_is_read_from_its_start_with_a_warning(
    lite: LiteServer, basin: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With s2.fail-on-data-loss=false the batch after the recreation covers the new stream from seq_num 0
    (planned again the same way on a replay), and a WARNING names the stream and the offsets."""
    _append(lite.endpoint, basin, "x", 5)
    end = _read_to_tail(lite.endpoint, basin)
    _recreate(lite.endpoint, basin, "x")
    _append(lite.endpoint, basin, "x", 7)
    reader = _restarted(lite.endpoint, basin, end, **{"s2.fail-on-data-loss": "false"})
    with caplog.at_level(logging.WARNING, logger="s2_sink._read.planning.data_loss"):
        nxt = reader.latestOffset()
    assert positions(nxt) == {"x": 7}
    (record,) = [r for r in caplog.records if "stream recreated" in r.getMessage()]
    assert "stream=x" in record.getMessage()
    assert "checkpointed_seq_num=5 tail=7 restart_at=0" in record.getMessage()
    for planner in (reader, _reader(lite.endpoint, basin, **{"s2.stream": "x"})):  # a replay plans alike
        (part,) = planner.partitions(_logged(end), _logged(nxt))
        assert isinstance(part, S2Partition)
        assert part.ranges == (("x", 0, 7),)
    assert positions(reader.latestOffset()) == {"x": 7}  # and it goes on from there


def test_a_tail_below_a_checkpoint_without_creation_times_is_a_recreated_stream(
    lite: LiteServer, basin: str
) -> None:
    """An offset logged before creation times were recorded ({"x": 5}) still fails when the stream holds fewer
    records than that (a reset server, a recreated stream)."""
    _append(lite.endpoint, basin, "x", 2)
    reader = _restarted(lite.endpoint, basin, {"x": 5})
    with pytest.raises(ReadError, match="holds fewer records than the checkpoint read"):
        reader.latestOffset()


def test_recreated_compares_creation_times_and_tails() -> None:
    """A stream is recreated when its creation time changed, or its tail is below the position; a stream
    without a known creation time is judged by its tail alone."""
    assert recreated({"a": 5, "b": 5}, {"a": "t1", "b": "t1"}, {"a": "t2", "b": "t1"}, {"a": 9, "b": 9}) == [
        "a"
    ]
    assert recreated({"a": 5}, {}, {"a": "t2"}, {"a": 4}) == ["a"]
    assert recreated({"a": 5}, {}, {"a": "t2"}, {"a": 5}) == []
    assert join({"b": 1, "a": 2}, {"a": "t"}) == {EPOCHS_KEY: {"a": "t"}, "a": 2, "b": 1}
    assert join({"a": 2}, {}) == {"a": 2}
