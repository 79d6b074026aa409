"""Retention ages, delete_on_empty and asynchronous deletes, with the server's time moved by a ManualClock."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import httpx
import pytest

from s2_sink.lite import LiteServer, ManualClock
from s2_sink.testing import fresh_basin

SWEEP_WAIT_S = 5.0


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    """The server's time, standing still unless a test advances it."""
    return ManualClock()


@pytest.fixture(scope="module")
def srv(clock: ManualClock) -> Iterator[LiteServer]:
    """A lite server on the manual clock."""
    with LiteServer(clock=clock) as s:
        yield s


@pytest.fixture
def http(srv: LiteServer) -> Iterator[httpx.Client]:
    """An HTTP/1.1 client for it."""
    with httpx.Client(base_url=srv.endpoint, timeout=10) as c:
        yield c


def eventually(check: Callable[[], bool]) -> None:
    """Wait (real time) until the background sweep has made ``check`` true."""
    deadline = time.monotonic() + SWEEP_WAIT_S
    while not check():
        assert time.monotonic() < deadline, "the background sweep did not get there"
        time.sleep(0.05)


def _make_stream(http: httpx.Client, basin: str, name: str, config: dict[str, object]) -> None:
    resp = http.post("/v1/streams", headers={"s2-basin": basin}, json={"stream": name, "config": config})
    assert resp.status_code == 201, resp.text


def _append(http: httpx.Client, basin: str, name: str, record: dict[str, object]) -> None:
    resp = http.post(f"/v1/streams/{name}/records", headers={"s2-basin": basin}, json={"records": [record]})
    assert resp.status_code == 200, resp.text


def _bodies(http: httpx.Client, basin: str, name: str) -> list[str] | int:
    resp = http.get(f"/v1/streams/{name}/records", params={"seq_num": 0}, headers={"s2-basin": basin})
    if resp.status_code != 200:
        return resp.status_code
    return [r["body"] for r in resp.json()["records"]]


def test_retention_trims_by_arrival_age(srv: LiteServer, clock: ManualClock, http: httpx.Client) -> None:
    """Records are trimmed once they arrived longer ago than retention_policy.age (whatever timestamp the
    client gave them); the tail does not move, and a read from seq_num 0 then answers 200 with no records,
    not 416 (lite/src/backend/read.rs, read_start_seq_num: the start is below the tail)."""
    basin = fresh_basin(srv.endpoint)
    _make_stream(
        http, basin, "r", {"retention_policy": {"age": 3600}, "timestamping": {"mode": "client-prefer"}}
    )
    _append(http, basin, "r", {"body": "old", "timestamp": 5})
    clock.advance(1800)
    _append(http, basin, "r", {"body": "new"})
    clock.advance(1801)
    eventually(lambda: _bodies(http, basin, "r") == ["new"])
    clock.advance(1800)
    eventually(lambda: _bodies(http, basin, "r") == [])
    tail = http.get("/v1/streams/r/records/tail", headers={"s2-basin": basin}).json()["tail"]
    assert tail["seq_num"] == 2
    _make_stream(http, basin, "forever", {"retention_policy": {"infinite": {}}})
    _append(http, basin, "forever", {"body": "kept"})
    clock.advance(10 * 365 * 24 * 3600)
    time.sleep(0.5)  # a few sweeps
    assert _bodies(http, basin, "forever") == ["kept"]


def test_delete_on_empty_after_min_age(srv: LiteServer, clock: ManualClock, http: httpx.Client) -> None:
    """A stream with delete_on_empty is deleted once it has retained nothing and had no write for
    min_age_secs; one that keeps records is not.

    As s2-lite: lite/src/backend/bgtasks/stream_doe.rs; streamer.rs, handle_terminal_trim (DeleteOnEmpty)."""
    basin = fresh_basin(srv.endpoint)
    doe = {"delete_on_empty": {"min_age_secs": 60}}
    _make_stream(http, basin, "expiring", {**doe, "retention_policy": {"age": 10}})
    _make_stream(http, basin, "kept", {**doe, "retention_policy": {"infinite": {}}})
    _make_stream(http, basin, "unused", doe)
    _append(http, basin, "expiring", {"body": "x"})
    _append(http, basin, "kept", {"body": "x"})
    clock.advance(30)
    eventually(lambda: _bodies(http, basin, "expiring") == [])
    assert http.get("/v1/streams/expiring", headers={"s2-basin": basin}).status_code == 200
    clock.advance(31)

    def names() -> list[str]:
        listed = http.get("/v1/streams", headers={"s2-basin": basin}).json()["streams"]
        return sorted(s["name"] for s in listed if s["deleted_at"] is None)

    eventually(lambda: names() == ["kept"])


def test_deletes_are_asynchronous(srv: LiteServer, clock: ManualClock, http: httpx.Client) -> None:
    """A deleted stream or basin answers 409 *_deletion_pending (and is listed with deleted_at) until the
    deletion completes; then it is 404 and the name can be used again. A basin being deleted still answers
    its config, and refuses new streams.

    As s2-lite: lite/src/backend/streams.rs (provision_stream, get_stream_config, delete_stream: a second
    delete is a no-op), basins.rs (get_basin_config does not look at the deletion, provision_basin and
    provision_stream refuse it), bgtasks/basin_deletion.rs and stream_trim.rs (they complete later)."""
    basin = fresh_basin(srv.endpoint)
    h = {"s2-basin": basin}
    _make_stream(http, basin, "s", {})
    assert http.delete("/v1/streams/s", headers=h).status_code == 202
    assert http.delete("/v1/streams/s", headers=h).status_code == 202
    time.sleep(0.5)  # sweeps run, but the server's clock has not moved: still pending
    for resp in (
        http.get("/v1/streams/s/records", headers=h),
        http.post("/v1/streams/s/records", headers=h, json={"records": [{"body": "x"}]}),
        http.post("/v1/streams", headers=h, json={"stream": "s"}),
    ):
        assert (resp.status_code, resp.json()["code"]) == (409, "stream_deletion_pending")
    (listed,) = http.get("/v1/streams", headers=h).json()["streams"]
    assert listed["deleted_at"] is not None
    clock.advance(1)
    eventually(lambda: http.get("/v1/streams/s", headers=h).status_code == 404)
    _make_stream(http, basin, "s", {})
    assert http.delete(f"/v1/basins/{basin}").status_code == 202
    info = next(b for b in http.get("/v1/basins", params={"prefix": basin}).json()["basins"])
    assert info["state"] == "deleting"
    resp = http.get("/v1/streams/s", headers=h)  # a deleting basin deletes its streams
    assert (resp.status_code, resp.json()["code"]) == (409, "stream_deletion_pending")
    assert http.get(f"/v1/basins/{basin}").status_code == 200  # its config is still there
    resp = http.put(f"/v1/basins/{basin}", json={})
    assert (resp.status_code, resp.json()["code"]) == (409, "basin_deletion_pending")
    resp = http.post("/v1/streams", headers=h, json={"stream": "t"})
    assert (resp.status_code, resp.json()["code"]) == (409, "basin_deletion_pending")
    clock.advance(1)
    eventually(lambda: http.get(f"/v1/basins/{basin}").status_code == 404)
    assert http.put(f"/v1/basins/{basin}", json={}).status_code == 201


def test_the_deletion_delay_is_an_option() -> None:
    """``--deletion-delay`` (``LiteServer(deletion_delay_s=...)``) keeps a deletion pending as long as asked,
    so a test can meet the 409 s2-lite answers while its background task removes a stream."""
    with LiteServer(subprocess=True, deletion_delay_s=30) as slow:
        basin = fresh_basin(slow.endpoint)
        with httpx.Client(base_url=slow.endpoint, timeout=10) as c:
            _make_stream(c, basin, "s", {})
            assert c.delete("/v1/streams/s", headers={"s2-basin": basin}).status_code == 202
            time.sleep(1.0)  # several sweeps of the real clock
            resp = c.get("/v1/streams/s", headers={"s2-basin": basin})
            assert (resp.status_code, resp.json()["code"]) == (409, "stream_deletion_pending")


def test_the_sweep_interval_is_an_option() -> None:
    """``LiteServer(sweep_interval_s=...)`` (in-process) sweeps that seldom: a deletion past its delay stays
    pending until the next sweep (a harness holding 100,000 streams sweeps once a minute, as S2-lite's
    background tasks run). A subprocess server refuses it."""
    clock = ManualClock()
    with LiteServer(clock=clock, sweep_interval_s=3600) as seldom:
        basin = fresh_basin(seldom.endpoint)
        with httpx.Client(base_url=seldom.endpoint, timeout=10) as c:
            _make_stream(c, basin, "s", {})
            assert c.delete("/v1/streams/s", headers={"s2-basin": basin}).status_code == 202
            clock.advance(60)
            time.sleep(0.5)  # two default sweeps of the real clock
            resp = c.get("/v1/streams/s", headers={"s2-basin": basin})
            assert (resp.status_code, resp.json()["code"]) == (409, "stream_deletion_pending")
    with pytest.raises(ValueError, match="sweep_interval_s"):
        LiteServer(subprocess=True, sweep_interval_s=60)
