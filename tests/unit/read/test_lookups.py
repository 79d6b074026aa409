"""The s2 source's S2 calls against the lite server, without Spark: shared client, ReadError."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import s2_sdk

from s2_sink import ReadError, S2SinkError
from s2_sink._read import session as _session
from s2_sink._read.planning import lookups as _lookups
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.rows_by_record import to_records


def _cfg(endpoint: str, basin: str, **extra: Any) -> S2Config:
    return S2Config(basin=basin, account_endpoint=endpoint, basin_endpoint=endpoint, **extra)


def _append(endpoint: str, basin: str, stream: str, *texts: str) -> None:
    """Append plain records over the REST API (the basin creates the stream on append)."""
    with httpx.Client(http1=False, http2=True, timeout=10.0) as client:
        resp = client.post(
            f"{endpoint}/v1/streams/{stream}/records",
            json={"records": [{"body": t} for t in texts]},
            headers={"authorization": "Bearer test", "s2-basin": basin},
        )
    resp.raise_for_status()


def _no_gap(first: int, stop: int) -> None:
    raise AssertionError(f"unexpected gap [{first}, {stop})")


async def _client_count() -> int:
    return int(get_pool().stats()["clients"])


@pytest.fixture
def guarded() -> Iterator[LiteServer]:
    """A lite server that accepts only the bearer token ``right-token``."""
    with LiteServer(token="right-token") as srv:
        yield srv


def test_reads_use_the_pools_client_for_the_config(lite: LiteServer, basin: str) -> None:
    """Listing, tail lookups and range reads with one config share one client of the session pool
    (the writer's), so they get its timeouts, retries and compression; the records come back in order."""
    _append(lite.endpoint, basin, "s", "r0", "r1", "r2")
    # A token no other test uses gives the config a client of its own in the process-wide pool.
    cfg = _cfg(lite.endpoint, basin, access_token=f"tok-{uuid.uuid4().hex}", compression="zstd")
    before = _runtime.run(_client_count())

    assert sorted(_lookups.listed_epochs(cfg, "")) == ["s"]
    assert _lookups.tails(cfg, ["s"]) == {"s": 3}
    batches = list(_session.read_range_columns(cfg, "s", 1, 3, _no_gap))

    assert [r.body for batch in batches for r in to_records(batch)] == [b"r1", b"r2"]
    assert _runtime.run(_client_count()) == before + 1


def test_tail_of_a_missing_stream_raises_read_error(lite: LiteServer, basin: str) -> None:
    """Looking up the tail of a stream that does not exist raises ReadError naming the stream and the
    basin, with the SDK's 404 chained."""
    cfg = _cfg(lite.endpoint, basin)
    with pytest.raises(ReadError, match=rf"'no-such-stream'.*basin '{basin}'") as info:
        _lookups.tails(cfg, ["no-such-stream"])
    assert isinstance(info.value, S2SinkError)
    assert isinstance(info.value.__cause__, s2_sdk.S2ServerError)
    assert info.value.__cause__.status_code == 404


def test_reading_a_missing_stream_raises_read_error(lite: LiteServer, basin: str) -> None:
    """Reading a range of a stream that does not exist raises ReadError naming the stream, the range and
    the basin, with the SDK error chained."""
    cfg = _cfg(lite.endpoint, basin)
    with pytest.raises(ReadError, match=rf"reading 'gone' seq_nums \[0, 5\) in basin '{basin}'") as info:
        list(_session.read_range_columns(cfg, "gone", 0, 5, _no_gap))
    assert isinstance(info.value.__cause__, s2_sdk.S2Error)


def test_a_bad_token_raises_read_error(guarded: LiteServer) -> None:
    """A token the server refuses makes listing raise ReadError naming the basin, with the SDK's 401
    chained; the token itself appears nowhere in the message."""
    basin = fresh_basin(guarded.endpoint, token="right-token")
    cfg = _cfg(guarded.endpoint, basin, access_token="wrong-token", max_retries=0)
    with pytest.raises(ReadError, match=rf"listing streams with prefix '' in basin '{basin}'") as info:
        sorted(_lookups.listed_epochs(cfg, ""))
    assert isinstance(info.value.__cause__, s2_sdk.S2ServerError)
    assert info.value.__cause__.status_code == 401
    assert "wrong-token" not in str(info.value)


def test_listing_pages_past_a_thousand_streams(lite: LiteServer, basin: str) -> None:
    """A prefix with more streams than one page (S2 lists at most 1000) is listed whole, page after page
    (s2-lite: common/src/resources.rs, ListLimit; lite/src/backend/streams.rs, list_streams)."""
    names = [f"p/{i:04d}" for i in range(1003)]
    with httpx.Client(base_url=lite.endpoint, timeout=10.0) as client:
        for name in names:
            resp = client.put(f"/v1/streams/{name.replace('/', '%2F')}", headers={"s2-basin": basin})
            assert resp.status_code == 201, resp.text
    assert sorted(_lookups.listed_epochs(_cfg(lite.endpoint, basin), "p/")) == names


def test_positions_of_a_stream_trimmed_to_nothing(lite: LiteServer, basin: str) -> None:
    """Everything trimmed: S2 answers reads below the trim point with no records (200, not 416), and the
    reader's positions are the tail: the first record kept, a timestamp's position; a range read reports
    the whole range as a gap (s2-lite: lite/src/backend/read.rs, read_start_seq_num)."""
    _append(lite.endpoint, basin, "t", "a", "b", "c")
    cfg = _cfg(lite.endpoint, basin)

    async def trim() -> None:
        client = get_pool().client(cfg)
        records = [s2_sdk.CommandRecord.trim(1000)]
        await client.basin(basin).stream("t").append(s2_sdk.AppendInput(records=records))

    _runtime.run(trim())  # the trim record is seq_num 3: everything below 4 is gone
    assert _lookups.first_seqs(cfg, ["t"]) == {"t": 4}
    assert _lookups.resolve_timestamp(cfg, ["t"], 1) == {"t": 4}
    gaps: list[tuple[int, int]] = []
    assert list(_session.read_range_columns(cfg, "t", 0, 4, lambda lo, hi: gaps.append((lo, hi)))) == []
    assert gaps == [(0, 4)]
