"""Batches with headers on every record (or most, such as an upsert batch's ``@key`` and ``@action``) are read
in bulk and kept as one renumbered buffer, and nothing a client can see differs: the same decisions (stored
records, timestamps, conditions, errors) as the record-by-record decoding, and every read path returns the
canonical encoding of what was appended, byte for byte, under any count and byte limit, also after the
durable log is replayed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st
from s2_sdk import CommandRecord, Record

from s2_sink.lite import LiteServer
from s2_sink.lite._append_input import ONE_MIB, parse_input
from s2_sink.lite._durability import encode_append, encode_meta, replay
from s2_sink.lite._errors import ApiError
from s2_sink.lite._store import Store
from s2_sink.lite._stream import Stream
from s2_sink.lite._wire import pb, varint
from s2_sink.testing import fresh_basin
from tests.lite.test_append_scan import outcome, record_by_record, uniform_scan_of
from tests.lite.test_mostly_plain import CONFIG, _append, encoded, expected, read_every_way


def upsert(n: int, *, start: int = 0, large: bool = True, uniform: bool = False) -> list[Record]:
    """`n` records as the upsert encoder writes them, with bodies of every length class (empty, 1, 2 and,
    if `large`, 3 length bytes) and keys of one and two length bytes; if `uniform`, of the one layout the
    scan's shortcut reads (no empty body, no body or key of more than one or two length bytes)."""
    sizes = [0, 1, 127, 128, 129, 300, 16386 if large else 7, 16387 if large else 150, 40]
    if uniform:
        sizes = [1, 127, 128, 129, 300, 16383, 7, 150, 40]
    out = []
    for i in range(start, start + n):
        key = b'{"id":%d}' % i if i % 7 or uniform else b"k" * 200
        action = b"d" if i % 5 == 0 else b"u"
        out.append(
            Record(bytes([65 + i % 26]) * sizes[i % len(sizes)], [(b"@key", key), (b"@action", action)])
        )
    return out


def metered(r: Record) -> int:
    return 8 + len(r.body) + sum(2 + len(k) + len(v) for k, v in r.headers)


def sequenced(recs: list[Record], arrival: int = 1_000) -> Stream:
    """A stream holding `recs` as one visible batch."""
    stream = Stream("b", "s", CONFIG, 0.0)
    stream.sequence(encoded(recs), arrival=arrival)
    stream.make_visible(stream.next_seq, stream.last_ts)
    return stream


def test_an_upsert_batch_is_kept_as_one_buffer() -> None:
    """Headers on every record: no per-record parts at append time, the batch keeps one buffer and the
    metered sizes the scan counted; it is not the plain form."""
    stream = Stream("b", "s", CONFIG, 0.0)
    b = stream.sequence(encoded(upsert(1000, large=False)), arrival=1)
    assert (b.plain, b.payload is not None, b.exceptions) == (False, True, {})
    p = parse_input(encoded(upsert(40)))
    assert (p.records, p.plain, p.metered is not None) == (None, False, True)


@pytest.mark.parametrize("uniform", [False, True], ids=["mixed layouts", "one layout"])
def test_read_back_byte_identical_from_any_start_under_any_limit(uniform: bool) -> None:
    """Every start, counts of 1, 2 and all, and byte budgets of three records: the canonical encodings of
    the records appended and their metered sizes (a batch of one layout read by the scan's shortcut, one
    of several by its general passes)."""
    recs = upsert(40, uniform=uniform)
    assert (uniform_scan_of(encoded(recs)) is not None) == uniform
    stream = sequenced(recs)
    want = expected(recs, 0, [1_000] * len(recs))
    sizes = [metered(r) for r in recs]
    for start in range(len(recs)):
        for count in (1, 2, 1000):
            assert stream.collect(start, count, 1 << 62, None).records == want[start : start + count]
        budget = sum(sizes[start : start + 3])
        got = stream.collect(start, 1000, budget, None)
        assert (got.records, got.nbytes) == (want[start : start + 3], budget)
        fit = len(sizes[start : start + 3]) - 1  # a byte short of the last of those
        if fit:
            assert stream.collect(start, 1000, budget - 1, None).records == want[start : start + fit]


def test_client_timestamps_are_kept_and_capped_as_before() -> None:
    """Records with client timestamps (some past the arrival time, which caps them) are read in bulk too,
    and read back with the timestamps sequencing gave them."""
    recs = upsert(30)
    for i, r in enumerate(recs):
        r.timestamp = [5, 2_000, None][i % 3]
    stream = sequenced(recs)
    stamps = []
    last = 0
    for r in recs:
        last = max(last, min(r.timestamp if r.timestamp is not None else 1_000, 1_000))
        stamps.append(last)
    assert stream.collect(0, 1000, 1 << 62, None).records == expected(recs, 0, stamps)


header_values = st.one_of(
    st.binary(max_size=10), st.binary(min_size=127, max_size=130), st.text(max_size=5).map(str.encode)
)
headed = st.builds(
    Record,
    st.one_of(st.binary(max_size=20), st.binary(min_size=126, max_size=300)),
    st.lists(
        st.tuples(st.one_of(st.binary(min_size=1, max_size=8), st.just(b"n" * 128)), header_values),
        min_size=1,
        max_size=4,
    ),
    st.one_of(st.none(), st.none(), st.integers(0, 2**64 - 1)),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(headed, headed, headed, st.builds(Record, st.binary(max_size=40))), min_size=1, max_size=30
    ),
    st.one_of(st.none(), st.integers(0, 2**64 - 1)),
    st.one_of(st.none(), st.text(max_size=10)),
)
def test_parse_decides_as_record_by_record(recs: list[Record], msn: int | None, token: str | None) -> None:
    """Records with headers (binary, non-ASCII, empty values, names and values of one and two length bytes,
    several per record), some without, timestamps, a trailer: the same decisions as record by record."""
    data = encoded(recs, msn, token)
    assert outcome(parse_input, data) == outcome(record_by_record, data)


def _field(key: int, value: bytes, *, overlong: bool = False) -> bytes:
    """A length-delimited field, its length written one byte longer than needed if `overlong`."""
    length = varint(len(value))
    if overlong:
        length = bytes([*length[:-1], length[-1] | 0x80, 0])
    return bytes([key]) + length + value


def _record(i: int) -> bytes:
    header = _field(0x0A, b"@key") + _field(0x12, b"%d" % i)
    return (
        _field(0x12, header)
        + _field(0x12, _field(0x0A, b"@action") + _field(0x12, b"u"))
        + _field(0x1A, b"x")
    )


@pytest.mark.parametrize("at", [0, 1, 5, 9])
@pytest.mark.parametrize(
    "odd",
    [
        "over-long record length",
        "over-long empty record",
        "over-long header length",
        "over-long name length",
        "over-long body length",
        "empty header name",
        "unknown record field",
    ],
)
def test_other_layouts_decide_as_record_by_record(odd: str, at: int) -> None:
    """A record of an upsert batch in another layout (first, second, in the middle, last): the scan does
    not take it, and the batch is decided as record by record decides it."""
    recs = [_field(0x0A, _record(i)) for i in range(10)]
    one = _record(at)
    if odd == "over-long record length":
        recs[at] = _field(0x0A, one, overlong=True)
    elif odd == "over-long empty record":
        recs[at] = _field(0x0A, b"", overlong=True)
    elif odd == "over-long header length":
        recs[at] = _field(0x0A, _field(0x12, _field(0x0A, b"@key"), overlong=True) + _field(0x1A, b"x"))
    elif odd == "over-long name length":
        recs[at] = _field(0x0A, _field(0x12, _field(0x0A, b"@key", overlong=True)) + _field(0x1A, b"x"))
    elif odd == "over-long body length":
        recs[at] = _field(0x0A, _field(0x12, _field(0x0A, b"@key")) + _field(0x1A, b"x", overlong=True))
    elif odd == "empty header name":
        recs[at] = _field(0x0A, _field(0x12, _field(0x0A, b"") + _field(0x12, b"v")) + _field(0x1A, b"x"))
    else:
        recs[at] = _field(0x0A, one + b"\x28\x01")
    data = b"".join(recs) + b"\x10\x07"
    assert outcome(parse_input, data) == outcome(record_by_record, data)
    p = parse_input(data) if outcome(parse_input, data)[0] != "error" else None
    assert p is None or p.records is not None or p.plain, "not kept as the scanned buffer"


@pytest.mark.parametrize(
    "trailer",
    [
        b"\x10\x07\x10\x08",  # match_seq_num twice (the last one counts)
        b"\x10\x87\x00",  # an over-long match_seq_num
        b"\x1a\x01t\x10\x07",  # fencing token before match_seq_num
        b"\x22\x01z",  # an unknown field
        b"\x1a\x01\xff",  # a fencing token that is not UTF-8
        b"\x10",  # cut short
    ],
)
def test_what_follows_the_records_decides_as_before(trailer: bytes) -> None:
    """An upsert batch's other fields in any layout: the same decisions; malformed, the same 400."""
    data = b"".join(_field(0x0A, _record(i)) for i in range(10)) + trailer
    try:
        want = outcome(record_by_record, data)
    except DecodeError:
        got = outcome(parse_input, data)
        assert got[:3] == ("error", 400, "bad_proto")
        assert str(got[3]).startswith("invalid AppendInput: Error parsing message")
    else:
        assert outcome(parse_input, data) == want


def test_commands_limits_fencing_and_match_seq_num_act_as_on_any_batch() -> None:
    """An upsert batch with a fence command, past the record limit, oversized, or under conditions: the
    same effects and errors as any batch."""
    stream = Stream("b", "s", CONFIG, 0.0)
    recs = upsert(10)
    recs[4] = CommandRecord.fence("f-1")
    stream.sequence(encoded(recs), arrival=1)
    assert stream.fencing_token == "f-1"
    assert stream.batches[-1].records is not None, "a command record goes record by record"
    with pytest.raises(ApiError) as err:
        stream.sequence(encoded(upsert(3), token="other"), arrival=2)
    assert err.value.status == 412
    with pytest.raises(ApiError) as err:
        stream.sequence(encoded(upsert(3), msn=9, token="f-1"), arrival=2)
    assert err.value.status == 412
    stream.sequence(encoded(upsert(3), msn=10, token="f-1"), arrival=2)
    assert stream.next_seq == 13
    assert outcome(parse_input, encoded(upsert(1001, large=False)))[1:] == (
        422,
        "invalid",
        "a batch must have 1 to 1000 records, got 1001",
    )
    for recs in (
        [Record(b"a" * 600_000, [(b"k", b"v")])] * 2,
        [Record(b"a" * (1 << 20), [(b"k", b"v")])] * 2,
    ):
        data = encoded(recs)
        assert outcome(parse_input, data) == outcome(record_by_record, data)
        assert outcome(parse_input, data)[:2] == ("error", 422)


@pytest.mark.parametrize("uniform", [False, True], ids=["mixed layouts", "one layout"])
def test_the_durable_log_restores_the_buffer(tmp_path: Path, uniform: bool) -> None:
    """Scanned batches written to the log and replayed are the same batches and read the same (also one read
    before it was logged, logged from its record list, and one with client timestamps kept per record)."""
    store = Store()
    log = [
        encode_meta({"op": "basin", "name": "b", "config": {}, "created_at": 0.0}),
        encode_meta({"op": "stream", "basin": "b", "name": "s", "config": CONFIG, "created_at": 0.0}),
    ]
    store.put_basin("b", {}, 0.0)
    stream = store.put_stream("b", "s", CONFIG, 0.0)
    stamped = upsert(20, start=80, uniform=uniform)
    stamped[3].timestamp = 7
    for k, recs in enumerate([upsert(40, uniform=uniform), upsert(40, start=40, uniform=uniform), stamped]):
        b = stream.sequence(encoded(recs), arrival=1_000)
        if k == 1:
            assert b.records
        log.append(encode_append(stream, b))
    stream.make_visible(stream.next_seq, stream.last_ts)
    path = tmp_path / "lite.log"
    path.write_bytes(b"".join(log))
    restored = Store()
    assert replay(path, restored) == len(log)
    again = restored.basins["b"].streams["s"]
    assert [b.plain for b in again.batches] == [False] * 3
    everything = stream.collect(0, 1000, 1 << 62, None).records
    assert len(everything) == 100
    assert again.collect(0, 1000, 1 << 62, None).records == everything
    for start in (0, 39, 40, 85):
        assert again.collect(start, 1000, 5000, None) == stream.collect(start, 1000, 5000, None)


# -- over the wire ----------------------------------------------------------------------------------------


@pytest.fixture(params=["HTTP/1.1", "HTTP/2"])
def http(request: pytest.FixtureRequest, lite: LiteServer) -> Iterator[httpx.Client]:
    """A client for the session server speaking one protocol."""
    h2 = request.param == "HTTP/2"
    with httpx.Client(http1=not h2, http2=h2, base_url=lite.endpoint, timeout=15.0) as c:
        yield c


def _stamps(stream: str, http: httpx.Client, basin: str, n: int) -> list[int]:
    doc = http.get(
        f"/v1/streams/{stream}/records", params={"seq_num": 0, "count": n}, headers={"s2-basin": basin}
    ).json()
    return [r["timestamp"] for r in doc["records"]]


@pytest.mark.parametrize("uniform", [False, True], ids=["mixed layouts", "one layout"])
def test_every_read_path_returns_the_canonical_records(http: httpx.Client, basin: str, uniform: bool) -> None:
    """Upsert batches (one with an exactly-once chunk tag first as well) read back over unary protobuf,
    unary JSON, an S2S session and SSE as the canonical encodings of the appended records."""
    recs: list[Record] = []
    stream = "uniform" if uniform else "upserts"
    for k in range(3):
        more = upsert(40, start=40 * k, uniform=uniform)
        if k == 1:
            more[0].headers.insert(0, (b"@s2sink", b"1 5f3a9c2e 3 1042 7 0 12 40"))
        _append(http, basin, stream, more)
        recs += more
    got = read_every_way(http, basin, stream, len(recs))
    want = expected(recs, 0, _stamps(stream, http, basin, len(recs)))
    for way, records in got.items():
        assert records == want, way


@pytest.mark.parametrize("uniform", [False, True], ids=["mixed layouts", "one layout"])
def test_restart_on_the_log_reads_back_the_same(tmp_path: Path, uniform: bool) -> None:
    """A durable server restarted on its directory serves scanned batches exactly as before."""
    with LiteServer(data_dir=tmp_path) as srv, httpx.Client(base_url=srv.endpoint, timeout=15.0) as http:
        basin = fresh_basin(srv.endpoint)
        for k in range(3):
            _append(http, basin, "durable", upsert(40, start=40 * k, uniform=uniform))
        before = read_every_way(http, basin, "durable", 120)
    with LiteServer(data_dir=tmp_path) as srv, httpx.Client(base_url=srv.endpoint, timeout=15.0) as http:
        after = read_every_way(http, basin, "durable", 120)
    assert after == before
    assert len(before["S2S session"]) == 120


_BYTES = st.one_of(
    st.integers(0, 255), st.sampled_from([0x00, 0x08, 0x0A, 0x10, 0x12, 0x1A, 0x22, 0x80, 0x81])
)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), _BYTES, st.sampled_from(["set", "insert", "delete"])), max_size=3
    ),
    st.booleans(),
)
def test_damaged_inputs_decide_as_record_by_record(edits: list[tuple[int, int, str]], trailer: bool) -> None:
    """An upsert batch with a few bytes changed, inserted or removed anywhere (keys, lengths, the trailer):
    whatever still parses is decided as record by record decides it, and the rest is refused as malformed."""
    data = bytearray(
        encoded(upsert(6, large=False), msn=7 if trailer else None, token="tok" if trailer else None)
    )
    for where, byte, how in edits:
        at = where % (len(data) + 1)
        if how == "insert":
            data.insert(at, byte)
        elif at < len(data):
            if how == "set":
                data[at] = byte
            else:
                del data[at]
    damaged = bytes(data)
    try:
        want = outcome(record_by_record, damaged)
    except DecodeError:
        assert outcome(parse_input, damaged)[:3] == ("error", 400, "bad_proto")
    else:
        assert outcome(parse_input, damaged) == want


def _canonical(tail: bytes) -> bool:
    """A stored headers-and-body part is what a serializer writes for the ``SequencedRecord`` it holds."""
    out: bytes = pb.SequencedRecord.FromString(tail).SerializeToString()
    return out == tail


@pytest.mark.parametrize("at", [0, 4, 9])
@pytest.mark.parametrize(
    "odd",
    [
        _field(0x12, _field(0x0A, b"@key") + _field(0x12, b"1")) + b"\x1a\x00",
        b"\x08\x05\x1a\x00",
        b"\x08\x05" + _field(0x12, _field(0x0A, b"@key")) + b"\x1a\x00",
        b"\x1a\x00",
        b"\x1a\x81\x00x",
    ],
    ids=["headers", "timestamp", "timestamp and header", "body only", "body only, over-long length"],
)
def test_an_empty_or_over_long_body_is_stored_in_canonical_form(odd: bytes, at: int) -> None:
    """A record of an upsert batch whose body is written out empty (proto3 omits it) or with an over-long
    length: decided as record by record, and stored as a serializer writes the ``SequencedRecord``, so reads
    serve canonical bytes (S2 re-encodes what it stores)."""
    recs = [_field(0x0A, _record(i)) for i in range(10)]
    recs[at] = _field(0x0A, odd)
    data = b"".join(recs)
    assert outcome(parse_input, data) == outcome(record_by_record, data)
    assert all(_canonical(t) for t in parse_input(data).tails())


def test_a_field_where_a_record_would_start_is_not_read_as_one() -> None:
    """The scan places records from the lengths the top-level parse found. Here a 3-byte field (field 2 as
    bytes, which a parse keeps as unknown) comes first, so the one record starts 3 bytes in; read from byte
    0, the bytes form a record of the same length and a fencing token after it. Only the check of each
    record's key tells the two apart: the record's body holds those 10 bytes; there is no fencing token."""
    real = _field(0x1A, b"\x0c\x1a\x0aABCD\x1a\x01t")  # the record: a body of 10 bytes
    data = b"\x12\x01\x1a" + _field(0x0A, real)
    want = outcome(record_by_record, data)
    assert want == (1, [b"\x22" + real[1:]], [], {}, None, None)
    assert outcome(parse_input, data) == want


# 8 + 2 * 2 + 13 metered bytes with the body's; one header has no value.
_KEYED = [(b"@key", b"k1"), (b"@action", b"")]


@pytest.mark.parametrize(
    ("sizes", "error"),
    [
        ([ONE_MIB - 25], None),
        ([ONE_MIB - 24], "record 0 is 1048577 metered bytes, more than 1 MiB"),
        ([1000, ONE_MIB - 1050], None),
        ([1000, ONE_MIB - 1049], "a batch may hold at most 1 MiB of metered bytes, got 1048577"),
        ([10, ONE_MIB - 24], "record 1 is 1048577 metered bytes, more than 1 MiB"),
        ([0] * 999 + [ONE_MIB - 25 * 1000], None),
    ],
    ids=[
        "record at 1 MiB",
        "record a byte over",
        "batch at 1 MiB",
        "batch a byte over",
        "second over",
        "1000",
    ],
)
def test_metered_limits_hold_to_the_byte(sizes: list[int], error: str | None) -> None:
    """Records with headers at and a byte past the 1 MiB limits, of a record and of a batch: the scan (and,
    for one record, the plain form with it aside) counts their metered sizes as record by record does, and
    takes or refuses them as it does."""
    data = encoded([Record(b"b" * size, _KEYED) for size in sizes])
    got = outcome(parse_input, data)
    assert got == outcome(record_by_record, data)
    if error is None:
        stream = Stream("b", "s", CONFIG, 0.0)
        b = stream.sequence(data, arrival=1)
        assert b.plain == (len(sizes) == 1), "one record: set aside in the plain form; more: scanned"
        assert b.cumulative_metered()[-1] == ONE_MIB
    else:
        assert got == ("error", 422, "invalid", error)


def test_a_trim_into_a_scanned_batch_reads_and_replays_from_the_trim_point(tmp_path: Path) -> None:
    """A trim command (in a later batch) to a seq_num inside a scanned batch: reads from before it start at
    the trim point, under byte limits cut inside the batch, and the durable log restores the same."""
    store = Store()
    store.put_basin("b", {}, 0.0)
    stream = store.put_stream("b", "s", CONFIG, 0.0)
    log = [
        encode_meta({"op": "basin", "name": "b", "config": {}, "created_at": 0.0}),
        encode_meta({"op": "stream", "basin": "b", "name": "s", "config": CONFIG, "created_at": 0.0}),
    ]
    recs = upsert(40)
    for batch in (recs, [CommandRecord.trim(17)]):
        log.append(encode_append(stream, stream.sequence(encoded(batch), arrival=1_000)))
    stream.make_visible(stream.next_seq, stream.last_ts)
    assert (stream.trim_point, stream.batches[0].payload is not None) == (17, True)
    want = expected(recs, 0, [1_000] * len(recs))
    sizes = [metered(r) for r in recs]
    path = tmp_path / "lite.log"
    path.write_bytes(b"".join(log))
    restored = Store()
    assert replay(path, restored) == len(log)
    for s in (stream, restored.basins["b"].streams["s"]):
        assert s.collect(0, 1000, 1 << 62, None).records[:-1] == want[17:]
        budget = sum(sizes[17:20])
        got = s.collect(3, 1000, budget - 1, None)
        assert (got.records, got.nbytes) == (want[17:19], sum(sizes[17:19]))


@pytest.mark.parametrize(
    "placed",
    [
        {0: b"\x10\x07"},
        {5: b"\x10\x07"},
        {0: b"\x1a\x03tok", 10: b"\x10\x07"},
        {3: b"\x1a\x03tok", 7: b"\x10\x07"},
        {0: b"\x10\x05", 10: b"\x10\x07"},  # match_seq_num twice: the last one counts
        {10: b"\x10\x07", 11: b"\x10\x05"},
        {4: b"\x1a\x02no", 10: b"\x1a\x03tok"},
    ],
)
def test_conditions_placed_anywhere_decide_as_record_by_record(placed: dict[int, bytes]) -> None:
    """match_seq_num and fencing_token before, between or after the records of an upsert batch, once or
    twice: the same records and conditions as record by record (the last of a repeated field counts)."""
    fields = [_field(0x0A, _record(i)) for i in range(10)]
    for at in sorted(placed, reverse=True):
        fields.insert(at, placed[at])
    data = b"".join(fields)
    want = outcome(record_by_record, data)
    msn = token = None
    for at in sorted(placed):  # in the order they come: the last of each counts
        field = placed[at]
        if field[0] == 0x10:
            msn = field[1]
        else:
            token = field[2:].decode()
    assert (want[0], want[4], want[5]) == (10, msn, token)
    assert outcome(parse_input, data) == want
