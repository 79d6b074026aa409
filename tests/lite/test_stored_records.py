"""A stream's batches as stored and read: any read returns, byte for byte, the records field of the
``ReadBatch`` of the canonical ``SequencedRecord`` encodings of what was appended (seq_num and timestamp
written out), for reads that start, end and cross batches anywhere under any count and byte limit; commands,
conditions and client timestamps act as S2's rules say; the durable log restores the same reads."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from s2_sdk import CommandRecord, Record

from s2_sink.lite._api_errors import ApiError
from s2_sink.lite._durability import encode_append, encode_meta, replay
from s2_sink.lite._store import Store
from s2_sink.lite._stream import Stream
from s2_sink.lite._wire import pb
from tests.lite.test_append_decoding import encoded

CONFIG: dict[str, Any] = {"timestamping": {"mode": "client-prefer"}}
TAG = (b"@s2sink", b"1 5f3a9c2e 3 1042 7 0 12 40")

body = st.one_of(
    st.just(b""),
    st.binary(min_size=1, max_size=13),
    st.binary(min_size=120, max_size=140),
    st.just(b"x" * 16390),
)
headers = st.lists(st.tuples(st.binary(min_size=1, max_size=5), st.binary(max_size=5)), max_size=2)
plain_batch = st.lists(st.builds(Record, body), min_size=1, max_size=70)
tagged_batch = plain_batch.map(lambda recs: [Record(recs[0].body, [TAG]), *recs[1:]])
headed_batch = st.lists(st.builds(Record, body, headers), min_size=1, max_size=70)
stamped_batch = st.lists(
    st.builds(Record, body, headers, st.none() | st.integers(0, 2_000)), min_size=1, max_size=70
)
batches = st.lists(st.one_of(plain_batch, tagged_batch, headed_batch, stamped_batch), min_size=1, max_size=4)


def varint(n: int) -> bytes:
    """A base-128 varint, written here apart from the server's."""
    out = bytearray()
    while True:
        out.append(n & 0x7F | (0x80 if n >= 0x80 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def layout(seq_num: int, timestamp: int, hdrs: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    """A ``SequencedRecord`` as the server writes every record: seq_num and timestamp always written out
    (also when 0), then headers and body in canonical form."""
    rest = pb.SequencedRecord(headers=[pb.Header(name=k, value=v) for k, v in hdrs], body=body)
    return b"\x08" + varint(seq_num) + b"\x10" + varint(timestamp) + rest.SerializeToString()


def expected(recs: list[Record], start: int, stamps: list[int]) -> list[bytes]:
    """The encodings of `recs` sequenced from `start`."""
    return [layout(start + i, stamps[i], list(r.headers), r.body) for i, r in enumerate(recs)]


def metered(r: Record) -> int:
    return 8 + len(r.body) + sum(2 + len(k) + len(v) for k, v in r.headers)


def appended(groups: list[list[Record]], stream: Stream | None = None) -> tuple[Stream, list[bytes]]:
    """A stream with one visible batch per group, and the canonical encodings of its records."""
    stream = stream or Stream("b", "s", CONFIG, 0.0)
    want: list[bytes] = []
    for recs in groups:
        b = stream.sequence(encoded(recs), arrival=1_000)
        want += expected(recs, b.start, [b.ts(i) for i in range(len(recs))])
    stream.make_visible(stream.next_seq, stream.last_ts)
    return stream, want


@settings(max_examples=60, deadline=None)
@given(batches, st.data())
def test_any_read_returns_the_canonical_records(groups: list[list[Record]], data: st.DataObject) -> None:
    """Body-only batches, batches tagged first, with headers, with client timestamps: reads from any start,
    under any count and byte budget, return the records that fit, their metered bytes and the next seq_num."""
    stream, want = appended(groups)
    sizes = [metered(r) for recs in groups for r in recs]
    n = len(want)
    for _ in range(4):
        start = data.draw(st.integers(0, n - 1))
        count = data.draw(st.integers(1, 1000))
        budget = data.draw(st.integers(min(sizes[start:]), 2 * sum(sizes[start:])))
        got = stream.collect(start, count, budget, None)
        fit = start
        total = 0
        while fit < n and fit - start < count and total + sizes[fit] <= budget:
            total += sizes[fit]
            fit += 1
        assert len(pb.ReadBatch.FromString(got.encoded).records) == got.count
        assert (got.records, got.count, got.nbytes, got.next_seq) == (
            want[start:fit],
            fit - start,
            total,
            fit,
        )


@pytest.mark.parametrize("start", [0, 1, 17, 37])
def test_byte_budgets_hold_to_the_byte(start: int) -> None:
    """A budget of exactly three records' metered bytes reads those three; a byte less, two."""
    recs = [Record(b"r" * (i * 13), [(b"@key", b"%d" % i)] if i % 3 else []) for i in range(40)]
    stream, want = appended([recs])
    budget = sum(map(metered, recs[start : start + 3]))
    got = stream.collect(start, 1000, budget, None)
    assert (got.records, got.nbytes) == (want[start : start + 3], budget)
    got = stream.collect(start, 1000, budget - 1, None)
    assert (got.records, got.nbytes) == (want[start : start + 2], budget - metered(recs[start + 2]))


def test_reads_cut_across_batches() -> None:
    """Batches of 1000, 7 and 1000 records, read 333 at a time."""
    groups = [[Record(b"%d" % (k * 1000 + i)) for i in range(size)] for k, size in enumerate((1000, 7, 1000))]
    stream, want = appended(groups)
    got: list[bytes] = []
    while len(got) < len(want):
        res = stream.collect(len(got), 333, 1 << 20, None)
        assert res.count == min(333, len(want) - len(got))
        got += res.records
    assert got == want


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, (1 << 63) - 2000),
    st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=40),
    st.booleans(),
)
def test_seq_nums_and_timestamps_of_any_size(start: int, stamps: list[int], each: bool) -> None:
    """Varints of every length up to ten bytes, for seq_nums and (uncapped client) timestamps, one for the
    whole batch or one per record."""
    stamps = sorted(stamps) if each else [stamps[0]] * len(stamps)
    stream = Stream("b", "s", {"timestamping": {"mode": "client-require", "uncapped": True}}, 0.0)
    stream.next_seq = stream.visible_seq = stream.trim_point = start
    recs = [Record(b"r%d" % i, [], ts) for i, ts in enumerate(stamps)]
    stream, want = appended([recs], stream)
    assert want == expected(recs, start, stamps)
    assert stream.collect(start, 1000, 1 << 30, None).records == want


def test_client_timestamps_are_kept_and_capped() -> None:
    """Records with client timestamps (some past the arrival time, which caps them) and without (which get
    the arrival time) read back with the timestamps sequencing gave them, never going back."""
    recs = [Record(b"r%d" % i, [(b"@key", b"%d" % i)], [5, 2_000, None][i % 3]) for i in range(30)]
    stream, _ = appended([recs])
    stamps, last = [], 0
    for r in recs:
        last = max(last, min(r.timestamp if r.timestamp is not None else 1_000, 1_000))
        stamps.append(last)
    assert stream.collect(0, 1000, 1 << 62, None).records == expected(recs, 0, stamps)


def test_commands_fencing_and_match_seq_num_act() -> None:
    """A fence command first and a trim command in the middle of a batch take effect; a batch's fencing token
    and ``match_seq_num`` are checked against the state before it; a refused batch changes nothing."""
    stream, _ = appended([[Record(b"x")] * 5])
    recs = [CommandRecord.fence("f-1"), *[Record(b"y")] * 14, CommandRecord.trim(3), *[Record(b"z")] * 14]
    stream.sequence(encoded(recs, msn=5), arrival=2)
    assert (stream.fencing_token, stream.trim_point, stream.next_seq) == ("f-1", 3, 35)
    for token, msn in (("other", None), ("f-1", 34)):
        with pytest.raises(ApiError) as err:
            stream.sequence(encoded([Record(b"w", [TAG])], msn=msn, token=token), arrival=3)
        assert err.value.status == 412
    assert stream.next_seq == 35
    stream.sequence(encoded([Record(b"w", [TAG])], msn=35, token="f-1"), arrival=3)
    assert stream.next_seq == 36


def _logged(tmp_path: Path, groups: list[list[Record]], read_first: bool) -> tuple[Stream, Stream]:
    """A stream holding `groups` (one batch each), and the same stream replayed from its durable log."""
    store = Store()
    store.put_basin("b", {}, 0.0)
    stream = store.put_stream("b", "s", CONFIG, 0.0)
    log = [
        encode_meta({"op": "basin", "name": "b", "config": {}, "created_at": 0.0}),
        encode_meta({"op": "stream", "basin": "b", "name": "s", "config": CONFIG, "created_at": 0.0}),
    ]
    for recs in groups:
        b = stream.sequence(encoded(recs), arrival=1_000)
        if read_first:
            stream.make_visible(stream.next_seq, stream.last_ts)
            assert stream.collect(b.start, 1000, 1 << 62, None).count == len(recs)
        log.append(encode_append(stream, b))
    stream.make_visible(stream.next_seq, stream.last_ts)
    path = tmp_path / "lite.log"
    path.write_bytes(b"".join(log))
    restored = Store()
    assert replay(path, restored) == len(log)
    return stream, restored.basins["b"].streams["s"]


@pytest.mark.parametrize("read_first", [False, True], ids=["logged unread", "read before logged"])
def test_the_durable_log_restores_the_same_reads(tmp_path: Path, read_first: bool) -> None:
    """Body-only, tagged, upsert and client-timestamped batches, and a trim into one of them, replayed from
    the log: the same records, timestamps, trim point and metered sizes, under byte limits too."""
    upsert = [Record(b"u" * (i * 7), [(b"@key", b"%d" % i), (b"@action", b"u")]) for i in range(40)]
    stamped = [Record(b"s%d" % i, [], [5, 2_000, None][i % 3]) for i in range(20)]
    tagged = [Record(b"t", [TAG]), *[Record(b"t" * i) for i in range(1, 40)]]
    groups = [[Record(b"p" * i) for i in range(40)], tagged, upsert, stamped, [CommandRecord.trim(57)]]
    stream, again = _logged(tmp_path, groups, read_first)
    assert (again.trim_point, again.next_seq, again.fencing_token) == (57, 141, "")
    everything = stream.collect(0, 1000, 1 << 62, None)
    assert everything.count == 141 - 57
    assert again.collect(0, 1000, 1 << 62, None) == everything
    for start in (0, 60, 79, 80, 125, 140):
        for budget in (30, 500, 5000):
            assert again.collect(start, 1000, budget, None) == stream.collect(start, 1000, budget, None)
    # The client timestamps (5, then capped at the arrival time) order reads by time as before.
    for ts in (0, 5, 6, 1_000, 1_001):
        assert again.seq_for_timestamp(ts) == stream.seq_for_timestamp(ts)
        assert again.collect(0, 1000, 1 << 62, ts) == stream.collect(0, 1000, 1 << 62, ts)


def test_a_log_of_an_earlier_layout_is_refused_with_the_fix(tmp_path: Path) -> None:
    """An append entry as the earlier lite server wrote it (kind 2) is not taken for a torn tail (which would
    be cut off): replay stops with what to do, and leaves the file as it was."""
    old = b"\x02" + b"\x00" * 40
    data = encode_meta({"op": "basin", "name": "b", "config": {}, "created_at": 0.0})
    data += struct.pack(">II", len(old), zlib.crc32(old)) + old
    path = tmp_path / "lite.log"
    path.write_bytes(data)
    with pytest.raises(ValueError, match="start it on a new --data-dir"):
        replay(path, Store())
    assert path.read_bytes() == data
