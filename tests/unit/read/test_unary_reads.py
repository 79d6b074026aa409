"""A task's small ranges are read by unary reads sent together (`s2_sink._read.session.read_unary`), not by a
read session each; what one answer does not hold is read on by a session; a failed unary read is retried.
Against the lite server, which answers unary reads as S2 does (tests/lite/test_records_semantics.py)."""

from __future__ import annotations

from typing import Any

import pytest
import s2_sdk

from s2_sink import ReadError
from s2_sink._read import session as _session
from s2_sink.config import S2Config
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.rows_by_record import to_records
from tests.unit.read.test_corked_lookups import _count_request_writes
from tests.unit.read.test_session import _append, _appends, _cutting_proxy, _no_gap, _sdk_records


@pytest.fixture(scope="module")
def counted() -> Any:
    """A lite server of this module's own that counts requests by kind."""
    with LiteServer(stats=True) as srv:
        yield srv


def _cfg(endpoint: str, basin: str, **extra: Any) -> S2Config:
    # A token of its own gives the test a client (and one connection) of its own in the process-wide pool.
    return S2Config(
        basin=basin, account_endpoint=endpoint, basin_endpoint=endpoint, access_token=f"t-{basin}", **extra
    )


def _read(cfg: S2Config, ranges: list[tuple[str, int, int]]) -> dict[str, list[int]]:
    got: dict[str, list[int]] = {}
    for stream, cols in _session.read_ranges_columns(cfg, ranges, lambda _, lo, hi: _no_gap(lo, hi)):
        got.setdefault(stream, []).extend(cols.seq_nums.tolist())
    return got


def test_small_ranges_are_unary_reads_leaving_together(counted: LiteServer) -> None:
    """64 streams' ranges of 20 records: each read once and whole by one unary read (no read session), the
    requests of the ranges started together leaving in shared socket writes (a write and a session per
    stream before)."""
    basin = fresh_basin(counted.endpoint)
    names = [f"u/{i:02d}" for i in range(64)]
    _appends(
        counted.endpoint,
        basin,
        {n: [[s2_sdk.Record(body=f"{n}:{j}".encode()) for j in range(30)]] for n in names},
    )
    cfg = _cfg(counted.endpoint, basin)
    assert _read(cfg, [(names[0], 0, 1)]) == {names[0]: [0]}  # connects
    assert counted.stats is not None
    before = counted.stats.snapshot()
    writes = _count_request_writes(cfg)

    got = _read(cfg, [(n, 5, 25) for n in names])

    delta = counted.stats.snapshot() - before
    assert got == {n: list(range(5, 25)) for n in names}
    assert {kind for kind, _ in delta.requests} == {"read"}
    assert delta.requests == {("read", n): 1 for n in names}
    assert delta.records_read == dict.fromkeys(names, 20)
    assert len(writes) <= len(names) // 4, f"{len(writes)} socket writes for {len(names)} unary reads"


def test_a_small_range_past_one_answer_is_read_on_by_a_session(counted: LiteServer) -> None:
    """Twelve records of 200 KB: a unary read answers with at most 1 MiB of them, and a session reads the
    rest, each record once, in order (the SDK's records)."""
    basin = fresh_basin(counted.endpoint)
    records = [s2_sdk.Record(body=bytes([65 + i]) * 200_000) for i in range(12)]
    _append(counted.endpoint, basin, "big", [records[:4], records[4:8], records[8:]])
    cfg = _cfg(counted.endpoint, basin)
    assert counted.stats is not None
    before = counted.stats.snapshot()

    runs = list(_session.read_range_columns(cfg, "big", 1, 12, _no_gap))

    delta = counted.stats.snapshot() - before
    got = [r for cols in runs for r in to_records(cols)]
    assert [(r.seq_num, r.body) for r in got] == [
        (r.seq_num, r.body) for r in _sdk_records(counted.endpoint, basin, "big", 1, 12)
    ]
    assert delta.requests == {("read", "big"): 1, ("read_session", "big"): 1}
    assert delta.records_read == {"big": 11}


def test_a_range_over_a_thousand_records_is_read_by_a_session(counted: LiteServer) -> None:
    """A range of more records than a unary read answers with is read by one session, as before."""
    basin = fresh_basin(counted.endpoint)
    _append(
        counted.endpoint, basin, "s", [[s2_sdk.Record(body=b"{}")] * 1000, [s2_sdk.Record(body=b"{}")] * 5]
    )
    cfg = _cfg(counted.endpoint, basin)
    assert counted.stats is not None
    before = counted.stats.snapshot()
    assert _read(cfg, [("s", 2, 1003)]) == {"s": list(range(2, 1003))}
    delta = counted.stats.snapshot() - before
    assert delta.requests == {("read_session", "s"): 1}


def test_a_connection_dropped_mid_answer_is_read_again(lite: LiteServer, basin: str) -> None:
    """When the connection dies in the middle of a unary read's answer, the read is sent again on a new
    connection: every record arrives once, in order. With retries off, the same fault fails the read with
    ReadError naming the range."""
    records = [s2_sdk.Record(body=f"{i:05d}".encode() * 120) for i in range(900)]  # ~540 KB, one answer
    _append(lite.endpoint, basin, "s", [records])
    with _cutting_proxy(lite.endpoint, cut_after=200_000) as (endpoint, accepted):
        got = [
            r.body
            for cols in _session.read_range_columns(_cfg(endpoint, basin), "s", 0, 900, _no_gap)
            for r in to_records(cols)
        ]
    assert got == [r.body for r in records]
    assert len(accepted) >= 2
    with _cutting_proxy(lite.endpoint, cut_after=200_000) as (endpoint, _):
        cfg = _cfg(endpoint, basin, max_retries=0, delivery_timeout_ms=0)
        with pytest.raises(ReadError, match=rf"reading 's' seq_nums \[0, 900\) in basin '{basin}'"):
            list(_session.read_range_columns(cfg, "s", 0, 900, _no_gap))
