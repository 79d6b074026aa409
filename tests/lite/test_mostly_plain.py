"""Mostly plain batches (body-only records but a few, such as an exactly-once chunk's tagged first record)
are kept in the plain stored form with those few aside, and nothing a client can see differs: every read path
returns the canonical encoding of what was appended, byte for byte, also after the durable log is replayed;
commands, fencing tokens and ``match_seq_num`` act as on any other batch."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from s2_sdk import AppendInput, CommandRecord, Record
from s2_sdk._mappers import append_input_to_proto

from s2_sink.lite import LiteServer
from s2_sink.lite._append_input import parse_input
from s2_sink.lite._durability import encode_append, encode_meta, replay
from s2_sink.lite._errors import ApiError
from s2_sink.lite._store import Store
from s2_sink.lite._stream import Stream
from s2_sink.lite._wire import RawList, pb, stored_part, varint
from s2_sink.testing import fresh_basin
from tests.lite.test_append_scan import outcome, record_by_record
from tests.lite.test_sse import events

TAG = (b"@s2sink", b"1 5f3a9c2e 3 1042 7 0 12 40")
CONFIG = {"timestamping": {"mode": "client-prefer"}}


def bodies(n: int) -> list[bytes]:
    """Bodies of every length class the stored form meters differently: empty, 1-byte and 2-byte lengths."""
    sizes = [0, 1, 127, 128, 129, 130, 300, 16386, 16387]
    return [bytes([65 + i % 26]) * sizes[i % len(sizes)] for i in range(n)]


def batch(n: int, special: dict[int, Record]) -> list[Record]:
    """`n` body-only records, but those given in `special`."""
    return [special.get(i, Record(b)) for i, b in enumerate(bodies(n))]


def encoded(recs: list[Record], msn: int | None = None, token: str | None = None) -> bytes:
    data: bytes = append_input_to_proto(
        AppendInput(recs, match_seq_num=msn, fencing_token=token)
    ).SerializeToString()
    return data


def tagged(i: int, n: int) -> Record:
    return Record(bodies(n)[i], [TAG])


SHAPES = {
    "first": lambda n: {0: tagged(0, n)},
    "middle": lambda n: {n // 2: tagged(n // 2, n)},
    "last": lambda n: {n - 1: tagged(n - 1, n)},
    "first, middle and last": lambda n: {i: tagged(i, n) for i in (0, n // 2, n - 1)},
    "first with a timestamp": lambda n: {0: Record(bodies(n)[0], [TAG], 5)},
    "two headers, empty body": lambda n: {3: Record(b"", [(b"@key", b"k"), (b"@action", b"d")])},
}


def appended(shape: str, n: int = 40) -> tuple[Stream, list[Record]]:
    """A stream holding one batch of `n` records in the given shape, and those records."""
    recs = batch(n, SHAPES[shape](n))
    stream = Stream("b", "s", CONFIG, 0.0)
    stream.sequence(encoded(recs), arrival=1_000)
    stream.make_visible(stream.next_seq, stream.last_ts)
    return stream, recs


def layout(seq_num: int, timestamp: int, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """A ``SequencedRecord`` as the server writes every record: seq_num and timestamp always written out
    (also when 0), then headers and body in canonical form."""
    rest = pb.SequencedRecord(headers=[pb.Header(name=k, value=v) for k, v in headers], body=body)
    return b"\x08" + varint(seq_num) + b"\x10" + varint(timestamp) + rest.SerializeToString()


def expected(recs: list[Record], start: int, stamps: list[int]) -> list[bytes]:
    """The encodings of `recs` sequenced from `start`."""
    return [layout(start + i, stamps[i], list(r.headers), r.body) for i, r in enumerate(recs)]


def stamps_of(stream: Stream, n: int) -> list[int]:
    (b,) = stream.batches
    return [b.ts(i) for i in range(n)]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_kept_in_the_plain_form_and_read_back_byte_identical(shape: str) -> None:
    """A batch whose few records with headers sit first, in the middle, last (or several of those) is
    kept plain with just those aside, and reads back as the canonical encoding of every record, from any
    start, under any count and byte limit (the metered sizes of the few records are theirs)."""
    stream, recs = appended(shape)
    (b,) = stream.batches
    assert b.plain
    assert sorted(b.exceptions) == sorted(SHAPES[shape](len(recs)))
    want = expected(recs, 0, stamps_of(stream, len(recs)))
    metered = [8 + len(r.body) + sum(2 + len(k) + len(v) for k, v in r.headers) for r in recs]
    for start in range(len(recs)):
        for count in (1, 2, 1000):
            got = stream.collect(start, count, 1 << 62, None)
            assert got.records == want[start : start + count]
        budget = sum(metered[start : start + 3])
        got = stream.collect(start, 1000, budget, None)
        assert got.records == want[start : start + 3]
        assert got.nbytes == budget


@pytest.mark.parametrize("n", [1, 2, 1000])
def test_a_chunk_tag_is_set_aside_in_a_batch_of_any_size(n: int) -> None:
    """One tagged record is set aside whatever the batch size, and the batch reads back as appended."""
    stream = Stream("b", "s", CONFIG, 0.0)
    recs = [Record(b"r%d" % i * 30, [TAG] if i == 0 else []) for i in range(n)]
    b = stream.sequence(encoded(recs), arrival=1)
    assert (b.plain, sorted(b.exceptions)) == (True, [0])
    stream.make_visible(stream.next_seq, stream.last_ts)
    got: list[bytes] = []
    while len(got) < n:
        got += stream.collect(len(got), 1000, 1 << 20, None).records
    assert got == expected(recs, 0, [1] * n)


def test_an_upsert_batch_is_kept_record_by_record() -> None:
    """Headers on every record (two each, as the upsert encoder writes): no search, the per-record form."""
    stream = Stream("b", "s", CONFIG, 0.0)
    upsert = [Record(b"r%d" % i * 30, [(b"@key", b"%d" % i), (b"@action", b"u")]) for i in range(1000)]
    b = stream.sequence(encoded(upsert), arrival=1)
    assert (b.plain, b.exceptions) == (False, {})


unknown_field = st.sampled_from([b"", b"\x3a\x01z", b"\x20\x05", b"\x82\x01\x01y", b"\x10\x07"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=6), unknown_field), max_size=3),
    st.binary(max_size=200),
    unknown_field,
)
def test_the_stored_part_is_that_of_a_sequenced_record(
    headers: list[tuple[bytes, bytes, bytes]], body: bytes, extra: bytes
) -> None:
    """A record's stored part, made by renumbering its own encoding, is the encoding of the
    ``SequencedRecord`` built of its headers and body, also with unknown fields in it or in a header."""
    encoded_headers = b"".join(
        _delimited(0x12, pb.Header(name=k, value=v).SerializeToString() + more) for k, v, more in headers
    )
    rec = pb.AppendRecord.FromString(encoded_headers + pb.AppendRecord(body=body).SerializeToString() + extra)
    want = pb.SequencedRecord(headers=rec.headers, body=rec.body).SerializeToString()
    assert stored_part(rec) == want


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 60).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.dictionaries(
                st.integers(0, n - 1),
                st.builds(
                    Record,
                    st.binary(max_size=200),
                    st.lists(st.tuples(st.binary(min_size=1, max_size=8), st.binary(max_size=8)), max_size=2),
                    st.one_of(st.none(), st.integers(0, 2**64 - 1)),
                ),
                max_size=4,
            ),
        )
    ),
    st.one_of(st.none(), st.integers(0, 2**40)),
    st.one_of(st.none(), st.text(max_size=8)),
)
def test_parse_decides_as_record_by_record(
    shape: tuple[int, dict[int, Record]], msn: int | None, token: str | None
) -> None:
    """Any input of body-only records with a few others anywhere: the same stored records, timestamps,
    conditions and errors as the record-by-record decoding."""
    n, special = shape
    data = encoded(batch(n, special), msn, token)
    assert outcome(parse_input, data) == outcome(record_by_record, data)


@pytest.mark.parametrize(
    "odd",
    [
        b"\x1a\x01x\x3a\x01z",  # an unknown field after the body
        b"\x1a\x00",  # an empty body written out
        b"\x1a\x01x\x1a\x01y",  # the body twice (the last one wins)
        b"\x1a\x81\x00x",  # an over-long length
    ],
)
@pytest.mark.parametrize("at", [1, 20])
def test_a_non_canonical_body_only_record_is_not_taken_for_plain(odd: bytes, at: int) -> None:
    """Next to a tagged first record, a body-only record in another layout than ``1a <len> <body>`` (near
    the front, and past the walk from it) keeps the batch out of the plain form: it is stored as the
    record-by-record decoding stores it."""
    recs = [append_input_to_proto(AppendInput([r])).records[0] for r in batch(30, {0: tagged(0, 30)})]
    raw = [r.SerializeToString() for r in recs]
    raw[at] = odd
    data = b"".join(_delimited(0x0A, r) for r in raw)
    assert outcome(parse_input, data) == outcome(record_by_record, data)
    p = parse_input(data)
    assert p.payload is None or not p.plain, "the whole batch goes the way it went before"


def _delimited(key: int, value: bytes) -> bytes:
    """A length-delimited field."""
    return bytes([key]) + varint(len(value)) + value


def test_commands_fencing_and_match_seq_num_act_as_on_any_batch() -> None:
    """A fence command first and a trim command in the middle of body-only records take effect; the
    batch's fencing token and ``match_seq_num`` are checked against the state before it."""
    stream = Stream("b", "s", CONFIG, 0.0)
    stream.sequence(encoded(batch(5, {})), arrival=1)
    recs = batch(30, {0: CommandRecord.fence("f-1"), 15: CommandRecord.trim(3)})
    stream.sequence(encoded(recs, msn=5), arrival=2)
    assert stream.fencing_token == "f-1"
    assert stream.trim_point == 3
    assert stream.batches[-1].plain
    assert sorted(stream.batches[-1].exceptions) == [0, 15]
    with pytest.raises(ApiError) as err:
        stream.sequence(encoded(batch(3, {0: tagged(0, 3)}), token="other"), arrival=3)
    assert err.value.status == 412
    with pytest.raises(ApiError) as err:
        stream.sequence(encoded(batch(3, {0: tagged(0, 3)}), msn=34, token="f-1"), arrival=3)
    assert err.value.status == 412
    stream.sequence(encoded(batch(3, {0: tagged(0, 3)}), msn=35, token="f-1"), arrival=3)
    assert stream.next_seq == 38
    with pytest.raises(ApiError) as err:
        stream.sequence(encoded(batch(3, {1: Record(b"x" * 37, [(b"", b"fence")])})), arrival=4)
    assert (err.value.status, str(err.value)) == (422, "fencing token must be at most 36 bytes, got 37")


def test_the_durable_log_restores_the_few_records(tmp_path: Path) -> None:
    """Mostly plain batches written to the log and replayed are the same batches: same form, same reads
    (also one whose records had been read before it was logged, which is logged from its record list)."""
    store = Store()
    log: list[bytes] = [
        encode_meta({"op": "basin", "name": "b", "config": {}, "created_at": 0.0}),
        encode_meta({"op": "stream", "basin": "b", "name": "s", "config": CONFIG, "created_at": 0.0}),
    ]
    store.put_basin("b", {}, 0.0)
    stream = store.put_stream("b", "s", CONFIG, 0.0)
    for k, special in enumerate(SHAPES.values()):
        b = stream.sequence(encoded(batch(40, special(40))), arrival=1_000)
        if k == 1:
            assert b.records
            assert b.payload is None
        log.append(encode_append(stream, b))
    stream.make_visible(stream.next_seq, stream.last_ts)
    path = tmp_path / "lite.log"
    path.write_bytes(b"".join(log))
    restored = Store()
    assert replay(path, restored) == len(log)
    again = restored.basins["b"].streams["s"]
    assert [(b.plain, b.exceptions) for b in again.batches] == [
        (b.plain, b.exceptions) for b in stream.batches
    ]
    assert all(b.exceptions for b in again.batches)
    everything = stream.collect(0, 1000, 1 << 62, None).records
    assert len(everything) == 40 * len(SHAPES)
    assert again.collect(0, 1000, 1 << 62, None).records == everything


# -- over the wire ----------------------------------------------------------------------------------------


@pytest.fixture(params=["HTTP/1.1", "HTTP/2"])
def http(request: pytest.FixtureRequest, lite: LiteServer) -> Iterator[httpx.Client]:
    """A client for the session server speaking one protocol."""
    h2 = request.param == "HTTP/2"
    with httpx.Client(http1=not h2, http2=h2, base_url=lite.endpoint, timeout=15.0) as c:
        yield c


def _append(http: httpx.Client, basin: str, stream: str, recs: list[Record]) -> None:
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


def _stamps(records: list[bytes]) -> list[int]:
    return [pb.SequencedRecord.FromString(r).timestamp for r in records]


def test_every_read_path_returns_the_canonical_records(http: httpx.Client, basin: str) -> None:
    """Batches tagged first, in the middle and last (and with a timestamp) read back over unary protobuf,
    unary JSON, an S2S session and SSE as the canonical encodings of the appended records."""
    recs: list[Record] = []
    for special in SHAPES.values():
        more = batch(40, special(40))
        _append(http, basin, "mixed", more)
        recs += more
    got = read_every_way(http, basin, "mixed", len(recs))
    want = expected(recs, 0, _stamps(got["unary protobuf"]))
    assert want[0] != want[1]
    for way, records in got.items():
        assert records == want, way


def test_restart_on_the_log_reads_back_the_same(tmp_path: Path) -> None:
    """A durable server restarted on its directory serves mostly plain batches exactly as before."""
    n = 0
    with LiteServer(data_dir=tmp_path) as srv, httpx.Client(base_url=srv.endpoint, timeout=15.0) as http:
        basin = fresh_basin(srv.endpoint)
        for special in SHAPES.values():
            _append(http, basin, "durable", batch(40, special(40)))
            n += 40
        before = read_every_way(http, basin, "durable", n)
    with LiteServer(data_dir=tmp_path) as srv, httpx.Client(base_url=srv.endpoint, timeout=15.0) as http:
        after = read_every_way(http, basin, "durable", n)
    assert after == before
    assert len(before["S2S session"]) == n
