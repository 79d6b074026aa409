"""Over the wire, every read path (unary protobuf, unary JSON, an S2S session, SSE; HTTP/1.1 and HTTP/2)
returns the canonical encodings of what was appended, byte for byte, for body-only batches, batches with an
exactly-once chunk tag anywhere, upsert batches and client timestamps; a durable server restarted on its
directory serves the same."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from s2_sdk import Record

from s2_sink.lite import LiteServer
from s2_sink.lite._wire import RawList, pb
from s2_sink.testing import fresh_basin
from tests.lite.test_append_decoding import encoded
from tests.lite.test_sse import events
from tests.lite.test_stored_records import TAG, expected, layout


def bodies(n: int) -> list[bytes]:
    """Bodies of every length class: empty, 1-, 2- and 3-byte lengths."""
    sizes = [0, 1, 127, 128, 129, 130, 300, 16386, 16387]
    return [bytes([65 + i % 26]) * sizes[i % len(sizes)] for i in range(n)]


def shapes(start: int) -> list[list[Record]]:
    """Batches of 40: body-only, tagged first, tagged in the middle and last, an upsert batch, and one with
    client timestamps."""
    b = bodies(40)
    plain = [Record(x) for x in b]
    first = [Record(b[0], [TAG]), *plain[1:]]
    middle_last = [*plain[:20], Record(b[20], [TAG]), *plain[21:39], Record(b[39], [TAG])]
    upsert = [Record(x, [(b"@key", b'{"id":%d}' % (start + i)), (b"@action", b"u")]) for i, x in enumerate(b)]
    stamped = [Record(x, [(b"@key", b"k")] if i % 2 else [], [5, None][i % 2]) for i, x in enumerate(b)]
    return [plain, first, middle_last, upsert, stamped]


@pytest.fixture(params=["HTTP/1.1", "HTTP/2"])
def http(request: pytest.FixtureRequest, lite: LiteServer) -> Iterator[httpx.Client]:
    """A client for the session server speaking one protocol."""
    h2 = request.param == "HTTP/2"
    with httpx.Client(http1=not h2, http2=h2, base_url=lite.endpoint, timeout=15.0) as c:
        yield c


def append(http: httpx.Client, basin: str, stream: str, recs: list[Record]) -> None:
    resp = http.post(
        f"/v1/streams/{stream}/records",
        headers={"s2-basin": basin, "content-type": "application/x-protobuf"},
        content=encoded(recs),
    )
    assert resp.status_code == 200, resp.text


def _frames(data: bytes) -> list[bytes]:
    out = []
    while data:
        n = int.from_bytes(data[:3], "big")
        assert data[3] == 0, "no terminal or compressed frame"
        out.append(data[4 : 3 + n])
        data = data[3 + n :]
    return out


def _json_records(doc: dict[str, Any]) -> list[bytes]:
    """The records of a ReadBatch in JSON (base64), laid out as `layout`."""
    return [
        layout(
            r["seq_num"],
            r["timestamp"],
            [(base64.b64decode(k), base64.b64decode(v)) for k, v in r["headers"]],
            base64.b64decode(r["body"]),
        )
        for r in doc["records"]
    ]


def read_every_way(http: httpx.Client, basin: str, stream: str, n: int) -> dict[str, list[bytes]]:
    """The records ``[0, n)`` as each read path returns them (as SequencedRecord encodings)."""
    h = {"s2-basin": basin}
    path = f"/v1/streams/{stream}/records"
    out: dict[str, list[bytes]] = {"unary protobuf": [], "unary json": []}
    while len(out["unary protobuf"]) < n:
        seq = len(out["unary protobuf"])
        resp = http.get(path, params={"seq_num": seq}, headers={**h, "accept": "application/x-protobuf"})
        out["unary protobuf"] += list(RawList.FromString(resp.content).items)
    while len(out["unary json"]) < n:
        seq = len(out["unary json"])
        doc = http.get(path, params={"seq_num": seq}, headers={**h, "s2-format": "base64"}).json()
        out["unary json"] += _json_records(doc)
    s2s = {**h, "content-type": "s2s/proto", "accept-encoding": "identity"}
    with http.stream("GET", path, params={"seq_num": 0, "count": n}, headers=s2s) as resp:
        frames = _frames(resp.read())
    out["S2S session"] = [rec for f in frames for rec in RawList.FromString(f).items]
    sse = {**h, "accept": "text/event-stream", "s2-format": "base64"}
    with http.stream("GET", path, params={"seq_num": 0, "count": n}, headers=sse) as resp:
        out["SSE session"] = [
            rec for e in events(resp) if e.event == "batch" for rec in _json_records(e.json())
        ]
    return out


def test_every_read_path_returns_the_canonical_records(http: httpx.Client, basin: str) -> None:
    """Each shape of batch, appended in turn, reads back the same way over every path."""
    recs = [r for batch in shapes(0) for r in batch]
    for batch in shapes(0):
        append(http, basin, "mixed", batch)
    got = read_every_way(http, basin, "mixed", len(recs))
    stamps = [pb.SequencedRecord.FromString(r).timestamp for r in got["unary protobuf"]]
    want = expected(recs, 0, stamps)
    assert want[0] != want[1]
    for way, records in got.items():
        assert records == want, way


def test_restart_on_the_log_reads_back_the_same(tmp_path: Path) -> None:
    """A durable server restarted on its directory serves every shape of batch exactly as before."""
    n = 0
    with LiteServer(data_dir=tmp_path) as srv, httpx.Client(base_url=srv.endpoint, timeout=15.0) as http:
        basin = fresh_basin(srv.endpoint)
        for batch in shapes(0):
            append(http, basin, "durable", batch)
            n += len(batch)
        before = read_every_way(http, basin, "durable", n)
    with LiteServer(data_dir=tmp_path) as srv, httpx.Client(base_url=srv.endpoint, timeout=15.0) as http:
        after = read_every_way(http, basin, "durable", n)
    assert after == before
    assert len(before["S2S session"]) == n
