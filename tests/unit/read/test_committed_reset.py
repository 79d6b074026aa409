"""Read-committed reads of a stream that was deleted and recreated after its writer committed to it
(the tail is below the committed end): the reader never takes ``min(tail, end)`` inside the new stream's
uncommitted records. Without Spark, against a real exactly-once ledger on the lite server."""

from __future__ import annotations

import asyncio

import pytest
import s2_sdk

from s2_sink._read.planning.committed import CommittedEnds
from s2_sink._read.planning.data_loss import positions
from s2_sink._read.planning.offsets import cap_committed_tails
from s2_sink._read.rows.schemas import RAW_SCHEMA
from s2_sink.datasource import S2DataSource
from s2_sink.datasource._readers import S2StreamReader
from s2_sink.errors import ReadError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, client, make_basin, run
from tests.integration._eo_batches import commit, open_execution, write_partitions


async def _recreate_with(endpoint: str, basin: str, stream: str, bodies: list[bytes]) -> None:
    """Delete `stream`, create it again and append `bodies` (records no exactly-once writer committed)."""
    async with client(endpoint) as s2:
        b = s2.basin(basin)
        await b.delete_stream(stream)
        for _ in range(100):  # deletion completes in the background
            try:
                await b.create_stream(stream)
                break
            except s2_sdk.S2ServerError as exc:
                if exc.code != "stream_deletion_pending":
                    raise
                await asyncio.sleep(0.05)
        records = [s2_sdk.Record(body=x) for x in bodies]
        await b.stream(stream).append(s2_sdk.AppendInput(records=records))


def _source(endpoint: str, basin: str, **extra: str) -> S2DataSource:
    return S2DataSource(
        {
            "s2.basin": basin,
            "s2.endpoints.account": endpoint,
            "s2.endpoints.basin": endpoint,
            "s2.streams": "events",
            "s2.isolation": "read-committed",
            "s2.committed-by": "w",
            **extra,
        }
    )


def test_reader_never_passes_a_reset_stream_end(lite: LiteServer) -> None:
    """The writer committed 4 records of "events"; the stream is recreated and holds 2 records nobody
    committed. A batch read and a streaming read fail with ReadError naming the stream, the tail and the
    committed end (before: both read the 2 uncommitted records, capped at min(tail, end) = the tail); with
    s2.fail-on-data-loss=false the streaming read reads none of the new stream."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin)
    r1 = open_execution(cfg, "w")
    commit(r1, cfg, 0, write_partitions(r1, cfg, 0, {0: [b"a0", b"a1"], 1: [b"a2", b"a3"]}))
    end = CommittedEnds(cfg, "w").fetch()["events"]
    assert end > 2
    run(_recreate_with(lite.endpoint, basin, "events", [b"x0", b"x1"]))

    wanted = f"stream 'events' ends at 2, below the end {end} "
    with pytest.raises(ReadError, match=wanted):
        _source(lite.endpoint, basin).reader(RAW_SCHEMA).partitions()
    failing = _source(lite.endpoint, basin).streamReader(RAW_SCHEMA)
    assert isinstance(failing, S2StreamReader)
    assert positions(failing.initialOffset()) == {"events": 0}  # earliest: the first stored record
    with pytest.raises(ReadError, match=wanted):
        failing.latestOffset()
    skipping = _source(lite.endpoint, basin, **{"s2.fail-on-data-loss": "false"}).streamReader(RAW_SCHEMA)
    assert isinstance(skipping, S2StreamReader)
    assert positions(skipping.initialOffset()) == {"events": 0}
    assert positions(skipping.latestOffset()) == {"events": 0}  # nothing of the new, uncommitted stream


def test_cap_committed_tails_only_resets_streams_below_their_end() -> None:
    """Streams at or past their committed end are capped by it as before; one below it fails or reads
    nothing; without committed ends (read-uncommitted) the tails pass unchanged."""
    tails = {"a": 12, "b": 3, "c": 5}
    assert cap_committed_tails(tails, None, fail=True) == tails
    assert cap_committed_tails(tails, {"a": 10, "b": 7}, fail=False) == {"a": 10, "b": 0, "c": 0}
    assert cap_committed_tails({"a": 12}, {"a": 10}, fail=True) == {"a": 10}
    with pytest.raises(ReadError, match="'b' ends at 3, below the end 7"):
        cap_committed_tails(tails, {"a": 10, "b": 7}, fail=True)
