"""Read sessions over server-sent events (HTTP/1.1 and HTTP/2): resumable batch ids, pings, errors, as
s2-lite sends them (lite/src/handlers/v1/records.rs, read, ``ReadRequest::EventStream``;
api/src/v1/stream/sse.rs: ``batch`` events with a ``<last seq_num>,<count>,<bytes>`` id, ``ping`` events
with the time and the tail, ``error`` events, and ``data: [DONE]`` when a session ends without error)."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from s2_sink.lite import LiteServer

SSE = {"accept": "text/event-stream"}


@dataclass
class Event:
    """One server-sent event."""

    event: str
    data: str
    id: str | None

    def json(self) -> Any:
        """The data parsed as JSON."""
        return json.loads(self.data)


def events(resp: httpx.Response) -> Iterator[Event]:
    """The events of an SSE response, as they arrive."""
    fields: dict[str, list[str]] = {}
    for line in resp.iter_lines():
        if line == "":
            if fields:
                ev = fields.get("event", ["message"])[0]
                yield Event(ev, "\n".join(fields.get("data", [])), fields.get("id", [None])[0])
            fields = {}
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name, []).append(value.removeprefix(" "))


@pytest.fixture(params=["HTTP/1.1", "HTTP/2"])
def http(request: pytest.FixtureRequest, lite: LiteServer) -> Iterator[httpx.Client]:
    """A client for the session server speaking one protocol (each test runs over both)."""
    h2 = request.param == "HTTP/2"
    with httpx.Client(http1=not h2, http2=h2, base_url=lite.endpoint, timeout=15.0) as c:
        yield c


def _append(http: httpx.Client, basin: str, stream: str, bodies: list[str], **hdrs: str) -> None:
    resp = http.post(
        f"/v1/streams/{stream}/records",
        headers={"s2-basin": basin, **hdrs},
        json={"records": [{"body": b} for b in bodies]},
    )
    assert resp.status_code == 200, resp.text


def test_bounded_read_in_raw_and_base64(http: httpx.Client, basin: str) -> None:
    """A bounded SSE read sends batch events in the requested s2-format, each with a seq,count,bytes id,
    then the done event."""
    _append(http, basin, "b", ["héllo", "wörld", "third"])
    binary = base64.b64encode(b"\x00\xff").decode()
    _append(http, basin, "b", [binary], **{"s2-format": "base64"})
    h = {"s2-basin": basin, **SSE}
    with http.stream("GET", "/v1/streams/b/records", params={"seq_num": 0, "count": 4}, headers=h) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "text/event-stream"
        assert resp.http_version == http.get("/ping").http_version
        got = list(events(resp))
    assert [(e.event, e.data if e.event == "message" else "") for e in got] == [
        ("batch", ""),
        ("message", "[DONE]"),
    ]
    batch = got[0].json()
    assert [r["body"] for r in batch["records"]][:3] == ["héllo", "wörld", "third"]
    assert "tail" not in batch  # stored records: only live ones carry the tail
    metered = sum(8 + len(r["body"].encode()) for r in batch["records"][:3]) + 8 + 2
    assert got[0].id == f"3,4,{metered}"
    params = {"seq_num": 3, "count": 1}
    with http.stream(
        "GET", "/v1/streams/b/records", params=params, headers={**h, "s2-format": "base64"}
    ) as resp:
        only, _ = list(events(resp))
    assert base64.b64decode(only.json()["records"][0]["body"]) == b"\x00\xff"


def test_resume_from_last_event_id(http: httpx.Client, basin: str) -> None:
    """A batch id sent back as last-event-id resumes after that batch; the count bound and ids carry on, and a
    session resumed with its bound met reads nothing (a limit of zero: api/src/v1/stream/mod.rs, ReadEnd;
    records.rs, apply_last_event_id)."""
    _append(http, basin, "r", [f"r{i}" for i in range(6)])
    h = {"s2-basin": basin, **SSE}
    with http.stream("GET", "/v1/streams/r/records", params={"seq_num": 0}, headers=h) as resp:
        first = next(events(resp))
    assert (first.event, first.id) == ("batch", "5,6,60")
    _append(http, basin, "r", [f"r{i}" for i in range(6, 10)])
    params = {"seq_num": 0, "count": 8}
    resumed = {**h, "last-event-id": first.id}
    with http.stream("GET", "/v1/streams/r/records", params=params, headers=resumed) as resp:
        rest = list(events(resp))
    assert [r["body"] for r in rest[0].json()["records"]] == ["r6", "r7"]
    assert [e.id for e in rest] == ["7,8,80", None]
    done = {**h, "last-event-id": "7,8,80"}
    with http.stream("GET", "/v1/streams/r/records", params=params, headers=done) as resp:
        assert resp.status_code == 200
        assert [e.data for e in events(resp)] == ["[DONE]"]
    bad = http.get("/v1/streams/r/records", headers={**h, "last-event-id": "nope"})
    assert (bad.status_code, bad.json()["code"]) == (400, "bad_header")


@pytest.mark.waits  # 5-15 s for the idle heartbeat
def test_session_follows_the_tail_with_pings(http: httpx.Client, basin: str) -> None:
    """At the tail a session pings at once (with the tail), delivers new records as they land (with the tail
    after them), and pings again when idle, every 5-15 s (lite/src/backend/read.rs, new_heartbeat_sleep)."""
    _append(http, basin, "f", ["old"])
    h = {"s2-basin": basin, **SSE}
    with http.stream("GET", "/v1/streams/f/records", params={"seq_num": 1}, headers=h) as resp:
        stream = events(resp)
        ping = next(stream)
        assert ping.event == "ping"
        assert ping.json()["timestamp"] >= 0
        assert ping.json()["tail"]["seq_num"] == 1
        _append(http, basin, "f", ["new"])
        batch = next(stream)
        assert [r["body"] for r in batch.json()["records"]] == ["new"]
        assert batch.json()["tail"]["seq_num"] == 2
        assert batch.id == "1,1,11"
        idle_since = time.monotonic()
        assert next(stream).event == "ping"
        # Heartbeats come every 5-15 s while idle, inside the SDKs' 20-25 s liveness timeouts.
        assert 4.5 <= time.monotonic() - idle_since <= 16


def test_errors_before_and_during_a_session(http: httpx.Client, basin: str) -> None:
    """A start past the tail is a 416 JSON answer; deleting the stream sends its terminal trim record, then
    ends the session with an error event: 503 unavailable, its streamer gone (streamer.rs, read.rs)."""
    _append(http, basin, "e", ["x"])
    h = {"s2-basin": basin, **SSE}
    resp = http.get("/v1/streams/e/records", params={"seq_num": 5, "count": 1}, headers=h)
    assert (resp.status_code, resp.json()) == (
        416,
        {"tail": {"seq_num": 1, "timestamp": resp.json()["tail"]["timestamp"]}},
    )
    with http.stream("GET", "/v1/streams/e/records", params={"seq_num": 1}, headers=h) as resp:
        stream = events(resp)
        assert next(stream).event == "ping"
        assert http.delete("/v1/streams/e", headers={"s2-basin": basin}).status_code == 202
        rest = list(stream)
    assert [e.event for e in rest] == ["batch", "error"]
    (terminal,) = rest[0].json()["records"]
    assert terminal["headers"] == [["", "trim"]]
    assert rest[1].json()["code"] == "unavailable"
