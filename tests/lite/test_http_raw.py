"""Raw HTTP/2 against the lite server (httpx, h2c prior knowledge): JSON, limits, auth, routing, errors."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import pytest
from s2_sdk import AppendInput, Record, S2ServerError, SeqNum
from s2_sdk._generated.s2.v1 import s2_pb2 as pb

from s2_sink.lite import LiteServer
from tests.lite._sdk import client, run


@pytest.fixture
def http(lite: LiteServer) -> Iterator[httpx.Client]:
    """A prior-knowledge HTTP/2 client for the session server."""
    with httpx.Client(http1=False, http2=True, base_url=lite.endpoint, timeout=10.0) as c:
        yield c


def test_ping_and_health(http: httpx.Client) -> None:
    """GET /ping and GET /health answer 200 OK over HTTP/2."""
    for path in ("/ping", "/health"):
        resp = http.get(path)
        assert (resp.status_code, resp.text, resp.http_version) == (200, "OK", "HTTP/2")


def test_json_append_and_read_raw_and_base64(http: httpx.Client, basin: str) -> None:
    """JSON appends and reads work in both s2-format raw (UTF-8 text) and base64 (binary)."""
    h = {"s2-basin": basin}
    resp = http.post(
        "/v1/streams/j%2Fson/records",
        headers=h,
        json={"records": [{"body": "héllo", "headers": [["k", "v"]], "timestamp": 5}]},
    )
    assert resp.status_code == 200, resp.text
    ack = resp.json()
    assert ack["start"]["seq_num"] == 0
    assert ack["end"]["seq_num"] == 1
    assert ack["tail"]["seq_num"] == 1
    binary = bytes(range(256))
    resp = http.post(
        "/v1/streams/j%2Fson/records",
        headers={**h, "s2-format": "base64"},
        json={"records": [{"body": base64.b64encode(binary).decode()}], "match_seq_num": 1},
    )
    assert resp.status_code == 200, resp.text
    got = http.get("/v1/streams/j%2Fson/records", params={"seq_num": 0}, headers=h).json()
    assert got["records"][0] == {"seq_num": 0, "timestamp": 5, "headers": [["k", "v"]], "body": "héllo"}
    got = http.get(
        "/v1/streams/j%2Fson/records", params={"seq_num": 1}, headers={**h, "s2-format": "base64"}
    ).json()
    assert base64.b64decode(got["records"][0]["body"]) == binary
    assert "tail" not in got  # stored records, not live ones: no tail (lite/src/backend/read.rs)
    resp = http.post(
        "/v1/streams/j%2Fson/records", headers=h, json={"records": [{"body": "x"}], "match_seq_num": 0}
    )
    assert (resp.status_code, resp.json()) == (412, {"seq_num_mismatch": 2})
    tail = http.get("/v1/streams/j%2Fson/records/tail", headers=h).json()
    assert tail["tail"]["seq_num"] == 2


def test_percent_encoded_slash_is_part_of_the_stream_name(http: httpx.Client, basin: str) -> None:
    """%2F in a path segment is a character of the stream name, never a separator.

    As s2-lite: lite/src/handlers/v1/paths.rs (the stream is one path segment)."""
    h = {"s2-basin": basin}
    assert (
        http.post("/v1/streams/a%2Fb/records", headers=h, json={"records": [{"body": "1"}]}).status_code
        == 200
    )
    streams = http.get("/v1/streams", headers=h).json()["streams"]
    assert [s["name"] for s in streams] == ["a/b"]
    assert http.get("/v1/streams/a/b", headers=h).status_code == 404


def _proto_append(http: httpx.Client, basin: str, inp: pb.AppendInput) -> httpx.Response:
    return http.post(
        "/v1/streams/limits/records",
        headers={
            "s2-basin": basin,
            "content-type": "application/x-protobuf",
            "accept": "application/x-protobuf",
        },
        content=inp.SerializeToString(),
    )


def test_batch_and_record_limits_are_422(http: httpx.Client, basin: str) -> None:
    """0 or 1001 records, more than 1 MiB metered per batch or per record, and empty header names are 422.

    As s2-lite: common/src/stream.rs, AppendRecordBatch and AppendRecord; common/src/caps.rs,
    RECORD_BATCH_MAX."""
    too_many = pb.AppendInput(records=[pb.AppendRecord(body=b"x") for _ in range(1001)])
    too_big = pb.AppendInput(records=[pb.AppendRecord(body=b"x" * 600_000) for _ in range(2)])
    big_record = pb.AppendInput(records=[pb.AppendRecord(body=b"x" * (1024 * 1024))])
    empty_name = pb.AppendInput(
        records=[pb.AppendRecord(body=b"x", headers=[pb.Header(name=b"", value=b"v")] * 2)]
    )
    for inp in (pb.AppendInput(), too_many, too_big, big_record, empty_name):
        resp = _proto_append(http, basin, inp)
        assert resp.status_code == 422, resp.text
        assert resp.json()["code"] == "invalid"
    exactly = pb.AppendInput(records=[pb.AppendRecord(body=b"x" * (1024 * 1024 - 8))])
    resp = _proto_append(http, basin, exactly)
    assert resp.status_code == 200, resp.text
    assert pb.AppendAck.FromString(resp.content).end.seq_num == 1


def test_malformed_requests_are_400(http: httpx.Client, basin: str) -> None:
    """A missing s2-basin header, junk protobuf, junk JSON and a bad query are 400 with the matching code.

    As s2-lite: lite/src/handlers/v1/error.rs, ServiceError::to_response."""
    assert http.get("/v1/streams").json()["code"] == "bad_header"
    resp = http.post(
        "/v1/streams/x/records",
        headers={"s2-basin": basin, "content-type": "application/x-protobuf"},
        content=b"\xff\xff\xff",
    )
    assert (resp.status_code, resp.json()["code"]) == (400, "bad_proto")
    resp = http.post("/v1/basins", content=b"{nope", headers={"content-type": "application/json"})
    assert (resp.status_code, resp.json()["code"]) == (400, "bad_json")
    resp = http.get("/v1/streams/x/records", params={"seq_num": "abc"}, headers={"s2-basin": basin})
    assert (resp.status_code, resp.json()["code"]) == (400, "bad_query")


def test_unsupported_resources_are_501(http: httpx.Client) -> None:
    """Access tokens, metrics and locations answer 501 not_implemented, like s2-lite.

    As s2-lite: lite/src/handlers/v1/access_tokens.rs, metrics.rs, locations.rs."""
    for path in ("/v1/access-tokens", "/v1/metrics", "/v1/locations"):
        resp = http.get(path)
        assert (resp.status_code, resp.json()["code"]) == (501, "not_implemented")


def test_token_protected_server_rejects_other_tokens_with_401() -> None:
    """With a token configured, the SDK with a different token gets 401 authn; the right token works."""
    with LiteServer(token="secret-1") as srv:

        async def main() -> None:
            async with client(srv, token="wrong") as s2:
                with pytest.raises(S2ServerError) as err:
                    await s2.list_basins()
                assert (err.value.status_code, err.value.code) == (401, "authn")
            async with client(srv, token="secret-1") as s2:
                await s2.create_basin("auth-basin-1")
                st = s2.basin("auth-basin-1").stream("s")
                await s2.basin("auth-basin-1").create_stream("s")
                await st.append(AppendInput(records=[Record(b"ok")]))
                assert (await st.read(start=SeqNum(0))).records[0].body == b"ok"

        run(main())
        with httpx.Client(http1=False, http2=True, base_url=srv.endpoint) as c:
            assert c.get("/ping").status_code == 200
            assert c.get("/v1/basins").status_code == 401


def test_create_with_a_replayed_request_token_is_not_a_conflict(http: httpx.Client, basin: str) -> None:
    """A create retried with the same s2-request-token and config succeeds (201, noop); another token, or the
    same token with another config, gets 409 resource_already_exists.

    As s2-lite: lite/src/backend/basins.rs and streams.rs, creation_idempotency_key (token and config);
    lite/src/handlers/v1/basins.rs, create_basin (201 for both outcomes)."""
    name = f"rt-{basin[2:]}"
    first = http.post("/v1/basins", json={"basin": name}, headers={"s2-request-token": "tok-a"})
    assert (first.status_code, first.headers["s2-provision-result"]) == (201, "created")
    again = http.post("/v1/basins", json={"basin": name}, headers={"s2-request-token": "tok-a"})
    assert (again.status_code, again.headers["s2-provision-result"]) == (201, "noop")
    other = {"basin": name, "config": {"create_stream_on_read": True}}
    assert http.post("/v1/basins", json=other, headers={"s2-request-token": "tok-a"}).status_code == 409
    assert (
        http.post("/v1/basins", json={"basin": name}, headers={"s2-request-token": "tok-b"}).status_code
        == 409
    )
    h = {"s2-basin": name}
    for outcome in ("created", "noop"):
        resp = http.post("/v1/streams", json={"stream": "s"}, headers={**h, "s2-request-token": "x"})
        assert (resp.status_code, resp.headers["s2-provision-result"]) == (201, outcome)
    resp = http.post("/v1/streams", json={"stream": "s"}, headers={**h, "s2-request-token": "y"})
    assert (resp.status_code, resp.json()["code"]) == (409, "resource_already_exists")
    assert http.delete(f"/v1/basins/{name}").status_code == 202


def _frames(data: bytes) -> list[tuple[int, bytes]]:
    out = []
    while data:
        n = int.from_bytes(data[:3], "big")
        out.append((data[3], data[4 : 3 + n]))
        data = data[3 + n :]
    return out


def _session(http: httpx.Client, basin: str, **params: int) -> list[pb.ReadBatch]:
    h = {"s2-basin": basin, "content-type": "s2s/proto"}
    with http.stream("GET", "/v1/streams/hb/records", params=params, headers=h) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "s2s/proto"
        frames = _frames(resp.read())
    assert all(flag == 0 for flag, _ in frames), "a clean end has no terminal frame"
    return [pb.ReadBatch.FromString(body) for _, body in frames]


def test_read_session_heartbeats_at_the_tail_and_ends_after_wait(http: httpx.Client, basin: str) -> None:
    """An S2S read session delivers stored records without a tail, then, reaching the tail of a read that
    may follow, a heartbeat (no records, tail set); started at the tail it sends the heartbeat at once and,
    with `wait`, ends cleanly once that long passes without records.

    As s2-lite: lite/src/backend/read.rs, read_session (catch-up batches have ``tail: None``; following
    yields ``Heartbeat(tail)``)."""
    http.post(
        "/v1/streams/hb/records",
        headers={"s2-basin": basin},
        json={"records": [{"body": "a"}, {"body": "b"}]},
    )
    batches = _session(http, basin, seq_num=0, count=10, wait=1)
    assert [r.body for r in batches[0].records] == [b"a", b"b"]
    assert not batches[0].HasField("tail")
    assert (len(batches[1].records), batches[1].tail.seq_num) == (0, 2)
    batches = _session(http, basin, seq_num=2, wait=1)
    assert len(batches) == 1
    assert not batches[0].records
    assert batches[0].HasField("tail")
    assert batches[0].tail.seq_num == 2


def test_read_session_preflight_errors_are_plain_json_responses(http: httpx.Client, basin: str) -> None:
    """A session that cannot start (416 beyond the tail) is answered with a normal JSON error, no frames.

    As s2-lite: lite/src/handlers/v1/records.rs, read (the session opens after read_start_seq_num)."""
    h = {"s2-basin": basin, "content-type": "s2s/proto"}
    http.post("/v1/streams/pf/records", headers={"s2-basin": basin}, json={"records": [{"body": "a"}]})
    resp = http.get("/v1/streams/pf/records", params={"seq_num": 5}, headers=h)
    assert (resp.status_code, resp.json()) == (
        416,
        {"tail": {"seq_num": 1, "timestamp": resp.json()["tail"]["timestamp"]}},
    )


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        (b"\x00\x00\x03\x80\x01\x90", "a terminal frame sent by the client"),
        (b"\x00\x00\x04\x60abc", "compression bits 11"),
        (b"\x00\x00\x05\x20junk", "a zstd frame that does not decompress"),
        (b"\x00\x00\x00", "an empty frame"),
    ],
)
def test_malformed_s2s_input_ends_the_session_with_bad_frame(
    http: httpx.Client, basin: str, frame: bytes, why: str
) -> None:
    """An append session answers a malformed input frame with a terminal frame: status 400, code bad_frame.

    As s2-lite: api/src/v1/stream/extract.rs, AppendRequest (Unexpected terminal frame as input); s2s.rs,
    FrameDecoder."""
    good = pb.AppendInput(records=[pb.AppendRecord(body=b"ok")]).SerializeToString()
    body = (len(good) + 1).to_bytes(3, "big") + b"\x00" + good + frame
    h = {"s2-basin": basin, "content-type": "s2s/proto"}
    resp = http.post("/v1/streams/frames/records", headers=h, content=body)
    assert resp.status_code == 200, why
    frames = _frames(resp.content)
    assert pb.AppendAck.FromString(frames[0][1]).end.seq_num >= 1
    flag, terminal = frames[-1]
    assert flag & 0x80, why
    assert int.from_bytes(terminal[:2], "big") == 400
    assert json.loads(terminal[2:])["code"] == "bad_frame"


def test_sse_read_session_sends_batch_and_ping_events(http: httpx.Client, basin: str) -> None:
    """Accept: text/event-stream reads as server-sent events: `batch` events with JSON ReadBatches and a
    `<last seq_num>,<count>,<bytes>` id, a `ping` with the tail when following it, and, once `wait` passes,
    a `[DONE]` event.

    As s2-lite: lite/src/handlers/v1/records.rs, read (EventStream); api/src/v1/stream/sse.rs."""
    h = {"s2-basin": basin}
    http.post("/v1/streams/sse/records", headers=h, json={"records": [{"body": "a"}, {"body": "b"}]})
    with http.stream(
        "GET",
        "/v1/streams/sse/records",
        params={"seq_num": 0, "wait": 1},
        headers={**h, "accept": "text/event-stream"},
    ) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"] == "text/event-stream"
        text = resp.read().decode()
    events = [
        dict(line.split(": ", 1) for line in block.splitlines()) for block in text.strip().split("\n\n")
    ]
    assert events[0]["event"] == "batch"
    batch = json.loads(events[0]["data"])
    assert [r["body"] for r in batch["records"]] == ["a", "b"]
    assert events[0]["id"] == "1,2,18"
    assert [e.get("event") for e in events[1:]] == ["ping", None]
    assert events[-1] == {"data": "[DONE]"}
    with http.stream(
        "GET",
        "/v1/streams/sse/records",
        params={"seq_num": 2, "wait": 1},
        headers={**h, "accept": "text/event-stream"},
    ) as resp:
        text = resp.read().decode()
    events = [
        dict(line.split(": ", 1) for line in block.splitlines()) for block in text.strip().split("\n\n")
    ]
    assert [e.get("event") for e in events] == ["ping", None]
    ping = json.loads(events[0]["data"])
    assert ping["timestamp"] > 0
    assert ping["tail"]["seq_num"] == 2
