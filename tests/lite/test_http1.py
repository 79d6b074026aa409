"""HTTP/1.1 beside h2c on one port: every route answers the same; keep-alive, chunked bodies, sniffing."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from typing import Any

import h2.connection
import h2.events
import httpx
import pytest

from s2_sink.lite import LiteServer
from s2_sink.testing import unique_basin_name


@pytest.fixture
def http1(lite: LiteServer) -> Iterator[httpx.Client]:
    """An HTTP/1.1-only client for the session server."""
    with httpx.Client(http1=True, http2=False, base_url=lite.endpoint, timeout=10.0) as c:
        yield c


@pytest.fixture
def http2(lite: LiteServer) -> Iterator[httpx.Client]:
    """A prior-knowledge HTTP/2 client for the session server."""
    with httpx.Client(http1=False, http2=True, base_url=lite.endpoint, timeout=10.0) as c:
        yield c


def _scrub(doc: Any, basin: str) -> Any:
    """The JSON answer with what differs between two runs (times, the basin name) blanked out."""
    if isinstance(doc, dict):
        return {k: "<t>" if k in ("created_at", "timestamp") else _scrub(v, basin) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_scrub(v, basin) for v in doc]
    if isinstance(doc, str):
        return doc.replace(basin, "<basin>")
    return doc


def _conversation(c: httpx.Client, basin: str) -> list[tuple[int, Any]]:
    """One request on every documented route (and their common errors): (status, scrubbed JSON) each."""
    h = {"s2-basin": basin}
    cfg = {"create_stream_on_append": False, "default_stream_config": {"retention_policy": {"age": 3600}}}
    fence = {"records": [{"headers": [["", "fence"]], "body": "tok"}]}
    calls: list[tuple[str, str, dict[str, str], Any]] = [
        ("POST", "/v1/basins", {}, {"basin": basin, "config": cfg}),
        ("POST", "/v1/basins", {}, {"basin": basin}),
        ("PUT", f"/v1/basins/{basin}", {}, {"config": cfg}),
        ("GET", f"/v1/basins/{basin}", {}, None),
        ("PATCH", f"/v1/basins/{basin}", {}, {"create_stream_on_read": True}),
        ("GET", f"/v1/basins?prefix={basin}", {}, None),
        ("POST", "/v1/streams", h, {"stream": "s/1"}),
        ("POST", "/v1/streams", h, {"stream": "s/1"}),
        ("PUT", "/v1/streams/s%2F2", h, {"storage_class": "express"}),
        ("GET", "/v1/streams/s%2F1", h, None),
        ("PATCH", "/v1/streams/s%2F1", h, {"timestamping": {"mode": "client-prefer"}}),
        ("GET", "/v1/streams?limit=1", h, None),
        ("POST", "/v1/streams/s%2F1/records", h, {"records": [{"body": "a"}, {"body": "b"}]}),
        ("POST", "/v1/streams/s%2F1/records", h, {"records": [{"body": "c"}], "match_seq_num": 0}),
        ("POST", "/v1/streams/s%2F1/records", h, fence),
        ("POST", "/v1/streams/s%2F1/records", h, {"records": [{"body": "d"}], "fencing_token": "no"}),
        ("GET", "/v1/streams/s%2F1/records?seq_num=0&count=2", h, None),
        ("GET", "/v1/streams/s%2F1/records?seq_num=99", h, None),
        ("GET", "/v1/streams/s%2F1/records/tail", h, None),
        ("GET", "/v1/streams/missing/records/tail", {"s2-basin": "no-such-basin-1"}, None),
        ("GET", "/v1/streams", {}, None),
        ("GET", "/v1/access-tokens", {}, None),
        ("PUT", "/v1/basins", {}, None),
        ("GET", "/v2/nothing", {}, None),
        ("DELETE", "/v1/streams/s%2F2", h, None),
        ("DELETE", f"/v1/basins/{basin}", {}, None),
    ]
    out: list[tuple[int, Any]] = []
    for method, path, headers, body in calls:
        resp = c.request(method, path, headers=headers, json=body)
        out.append((resp.status_code, _scrub(resp.json(), basin) if resp.content else None))
    return out


def test_every_route_answers_the_same_over_http1_and_http2(http1: httpx.Client, http2: httpx.Client) -> None:
    """The same conversation over HTTP/1.1 and over HTTP/2 gets the same statuses and JSON bodies."""
    over_h1 = _conversation(http1, unique_basin_name())
    over_h2 = _conversation(http2, unique_basin_name())
    assert over_h1 == over_h2
    statuses = [status for status, _ in over_h1]
    assert statuses[:12] == [201, 409, 200, 200, 200, 200, 201, 409, 201, 200, 200, 200]
    assert statuses[12:] == [200, 412, 200, 412, 200, 416, 200, 404, 400, 501, 405, 404, 202, 202]
    assert http1.get("/ping").http_version == "HTTP/1.1"
    assert http2.get("/ping").http_version == "HTTP/2"


def test_chunked_and_content_length_request_bodies(http1: httpx.Client, basin: str) -> None:
    """An append whose body is sent chunked (no Content-Length) is read whole, like a Content-Length one."""
    h = {"s2-basin": basin, "content-type": "application/json"}

    def pieces() -> Iterator[bytes]:
        yield b'{"records": [{"bo'
        yield b'dy": "chunked"}]}'

    resp = http1.post("/v1/streams/c/records", headers=h, content=pieces())
    assert resp.request.headers["transfer-encoding"] == "chunked"
    assert resp.status_code == 200, resp.text
    resp = http1.post("/v1/streams/c/records", headers=h, content=b'{"records": [{"body": "sized"}]}')
    assert resp.request.headers["content-length"] == "32"
    assert resp.json()["end"]["seq_num"] == 2
    got = http1.get("/v1/streams/c/records", params={"seq_num": 0}, headers={"s2-basin": basin}).json()
    assert [r["body"] for r in got["records"]] == ["chunked", "sized"]


def _recv_until(sock: socket.socket, marker: bytes, count: int = 1) -> bytes:
    buf = b""
    deadline = time.monotonic() + 10
    while buf.count(marker) < count and time.monotonic() < deadline:
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return buf


def test_keep_alive_and_pipelined_requests_share_one_connection(lite: LiteServer) -> None:
    """Two requests written back to back on one socket get two answers, in order, on that socket."""
    with socket.create_connection((lite.host, lite.port), timeout=10) as sock:
        req = b"GET /ping HTTP/1.1\r\nhost: x\r\n\r\nGET /v1/nope HTTP/1.1\r\nhost: x\r\n\r\n"
        sock.sendall(req)
        got = _recv_until(sock, b"HTTP/1.1 ", 2)
        while b"no route" not in got:
            got += sock.recv(65536)
        first, second = got.split(b"HTTP/1.1 ")[1:3]
        assert first.startswith(b"200")
        assert first.endswith(b"OK")
        assert second.startswith(b"404")
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        tail = _recv_until(sock, b"\r\n\r\nOK")
        assert tail.startswith(b"HTTP/1.1 200")
        assert tail.endswith(b"OK")
        assert sock.recv(10) == b""  # closed after the answer, as asked


def test_many_pipelined_requests_in_one_write(lite: LiteServer) -> None:
    """A thousand requests written at once are all answered, in order, on the same connection."""
    n = 1000
    with socket.create_connection((lite.host, lite.port), timeout=10) as sock:
        sock.sendall(b"GET /ping HTTP/1.1\r\nhost: x\r\n\r\n" * (n - 1))
        sock.sendall(b"GET /ping HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        got = b""
        while chunk := sock.recv(65536):
            got += chunk
    assert got.count(b"HTTP/1.1 200 OK\r\n") == n


def test_expect_100_continue_and_malformed_requests(lite: LiteServer, basin: str) -> None:
    """A client that waits for 100 Continue gets it before sending its body; junk gets 400 and a close."""
    body = b'{"records": [{"body": "x"}]}'
    with socket.create_connection((lite.host, lite.port), timeout=10) as sock:
        head = (
            f"POST /v1/streams/e/records HTTP/1.1\r\nhost: x\r\ns2-basin: {basin}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\nexpect: 100-continue\r\n\r\n"
        )
        sock.sendall(head.encode())
        assert _recv_until(sock, b"\r\n\r\n").startswith(b"HTTP/1.1 100 ")
        sock.sendall(body)
        assert _recv_until(sock, b"}}").startswith(b"HTTP/1.1 200 ")
    with socket.create_connection((lite.host, lite.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nno colon here\r\n\r\n")
        answer = _recv_until(sock, b"}")
        assert answer.startswith(b"HTTP/1.1 400 ")
        assert b"bad_request" in answer
        assert sock.recv(10) == b""


def test_http2_preface_split_across_writes_is_still_http2(lite: LiteServer) -> None:
    """The protocol is decided by the whole preface, even when it arrives a few bytes at a time."""
    conn = h2.connection.H2Connection()
    conn.initiate_connection()
    opening = conn.data_to_send()
    with socket.create_connection((lite.host, lite.port), timeout=10) as sock:
        for i in range(0, len(opening), 5):
            sock.sendall(opening[i : i + 5])
            time.sleep(0.01)
        events = conn.receive_data(sock.recv(65536))
    assert any(isinstance(ev, h2.events.RemoteSettingsChanged) for ev in events)
