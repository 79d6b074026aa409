"""A batch's read form (`_read_form`): what a read sends is, byte for byte, the records field of the
``ReadBatch`` of the canonical ``SequencedRecord`` encodings, whichever way the batch was stored and built (in
bulk or record by record), for reads that start, end and cross batches anywhere, under any limit."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from s2_sdk import Record

from s2_sink.lite import _read_form as read_form
from s2_sink.lite._append_input import parse_input
from s2_sink.lite._batch import Batch, _lengths_by_keys
from s2_sink.lite._read_form import _BULK_BELOW, _BULK_FROM
from s2_sink.lite._stream import Stream
from s2_sink.lite._wire import RawList, pb, varint
from tests.lite.test_mostly_plain import CONFIG, TAG, encoded, expected, layout

# Bodies of every size class: empty, held in an Arrow view (up to 12 bytes, with or without a key), one-
# and two-byte lengths.
body = st.one_of(
    st.just(b""),
    # No raw newline (as JSON has none): the records' keys are the stored form's only 0x0a bytes.
    st.binary(min_size=1, max_size=140).map(lambda b: b.replace(b"\n", b".")),
    st.binary(min_size=1, max_size=13),
    st.binary(min_size=120, max_size=140),
    st.just(b"x" * 16390),
)
headers = st.lists(st.tuples(st.binary(min_size=1, max_size=5), st.binary(max_size=5)), max_size=2)
plain_batch = st.lists(st.builds(Record, body), min_size=1, max_size=70)
headed_batch = st.lists(st.builds(Record, body, headers), min_size=1, max_size=70)
tagged_batch = plain_batch.map(lambda recs: [Record(recs[0].body, [TAG]), *recs[1:]])
stamped_batch = st.lists(
    st.builds(Record, body, headers, st.one_of(st.none(), st.integers(0, 2_000))), min_size=1, max_size=70
)
batches = st.lists(st.one_of(plain_batch, headed_batch, tagged_batch, stamped_batch), min_size=1, max_size=4)


def metered(r: Record) -> int:
    return 8 + len(r.body) + sum(2 + len(k) + len(v) for k, v in r.headers)


def appended(groups: list[list[Record]]) -> tuple[Stream, list[bytes], list[int]]:
    """A stream with one batch per group, the canonical encodings of its records and their metered sizes."""
    stream = Stream("b", "s", CONFIG, 0.0)
    want: list[bytes] = []
    for recs in groups:
        b = stream.sequence(encoded(recs), arrival=1_000)
        want += expected(recs, b.start, [b.ts(i) for i in range(len(recs))])
    stream.make_visible(stream.next_seq, stream.last_ts)
    return stream, want, [metered(r) for recs in groups for r in recs]


@settings(max_examples=60, deadline=None)
@given(batches, st.data())
def test_any_read_returns_the_canonical_records(groups: list[list[Record]], data: st.DataObject) -> None:
    stream, want, sizes = appended(groups)
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


def test_reads_cut_across_batches_of_bulk_and_small_size() -> None:
    """Batches of 1000 and 7 records (built in bulk and record by record), read 333 at a time."""
    groups = [[Record(b"%d" % (k * 1000 + i)) for i in range(size)] for k, size in enumerate((1000, 7, 1000))]
    stream, want, _ = appended(groups)
    got: list[bytes] = []
    while len(got) < len(want):
        res = stream.collect(len(got), 333, 1 << 20, None)
        assert res.count == min(333, len(want) - len(got))
        got += res.records
    assert got == want


def test_without_arrow_binary_view_batches_are_built_record_by_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a pyarrow older than 16 (no ``binary_view``; Databricks Runtime 15.4 LTS ships 14.0.1) a batch
    large enough for the bulk build is built record by record instead, into the same bytes."""
    monkeypatch.setattr(pa, "binary_view", lambda: pytest.fail("the bulk build ran without binary_view"))
    monkeypatch.setattr(read_form, "HAS_BINARY_VIEW", False)
    groups = [[Record(b"%d" % (k * 1000 + i)) for i in range(size)] for k, size in enumerate((1000, 40))]
    stream, want, _ = appended(groups)
    assert stream.collect(0, 2000, 1 << 20, None).records == want


@settings(max_examples=30, deadline=None)
@given(
    st.integers(0, (1 << 63) - 2000),
    st.one_of(
        st.integers(0, (1 << 64) - 1), st.lists(st.integers(0, (1 << 64) - 1), min_size=40, max_size=40)
    ),
    st.lists(body, min_size=40, max_size=40),
)
def test_seq_nums_and_timestamps_of_any_size(
    start: int, stamps: int | list[int], bodies: list[bytes]
) -> None:
    """Varints of every length, up to ten bytes, in a plain batch built in bulk."""
    n = len(bodies)
    ts_list = None if isinstance(stamps, int) else stamps
    ts0 = stamps if isinstance(stamps, int) else stamps[0]
    payload = encoded([Record(b) for b in bodies])
    b = Batch(start, start + n, records=None, payload=payload, ts0=ts0, ts_list=ts_list, last_ts=0)
    each = [ts0] * n if ts_list is None else ts_list
    want = [layout(start + i, each[i], [], body) for i, body in enumerate(bodies)]
    assert list(pb.ReadBatch.FromString(bytes(b.read_form().span(0, n))).records) == [
        pb.SequencedRecord.FromString(w) for w in want
    ]
    assert bytes(b.read_form().span(3, 17)) == b"".join(b"\x0a" + varint(len(w)) + w for w in want[3:17])
    # Its stored form is dropped once read: what ``records`` gives is made again from the read form.
    assert b.payload is None
    assert b.records == _plain(bodies)


def _plain(bodies: list[bytes]) -> list[bytes]:
    """Body-only ``AppendRecord`` encodings."""
    return [pb.AppendRecord(body=b).SerializeToString() for b in bodies]


# Values at each varint size boundary the bulk build takes (1 to 7 bytes), and anywhere below 2**49.
_near_boundary = st.builds(
    lambda k, d: min(max(0, (1 << (7 * k)) + d), (1 << 49) - 1001), st.integers(0, 7), st.integers(-40, 40)
)
_bulk_value = st.one_of(_near_boundary, st.integers(0, (1 << 49) - 1001))


@settings(max_examples=60, deadline=None)
@given(
    _bulk_value,
    st.one_of(_bulk_value, st.lists(_bulk_value, min_size=40, max_size=40)),
    st.one_of(
        st.lists(st.builds(Record, body), min_size=40, max_size=40),
        st.lists(st.builds(Record, body, headers), min_size=40, max_size=40),
    ),
)
def test_bulk_build_writes_every_size_it_takes(
    start: int, stamps: int | list[int], recs: list[Record]
) -> None:
    """Seq_nums (crossing a size boundary inside the batch or not) and timestamps of 1 to 7 varint bytes, one
    for all or one each, records of 1- to 3-byte lengths, plain or with headers: the batch is built in bulk
    (not record by record, as past 2**49) into the canonical encodings, as record by record builds it."""
    n = len(recs)
    ts_list = None if isinstance(stamps, int) else stamps
    ts0 = stamps if isinstance(stamps, int) else stamps[0]
    p = parse_input(encoded(recs))
    b = Batch(
        start,
        start + n,
        records=p.records,
        payload=p.payload,
        ts0=ts0,
        ts_list=ts_list,
        last_ts=0,
        plain=p.plain,
        exceptions=p.exceptions,
        metered=p.metered,
    )
    each = [ts0] * n if ts_list is None else ts_list
    # Within the bulk build's range.
    assert n >= _BULK_FROM
    assert max(start + n, *each) < _BULK_BELOW
    items = [b"\x0a" + varint(len(w)) + w for w in expected(recs, start, each)]
    form = b.read_form()
    assert bytes(form.data) == b"".join(items)
    assert form.offsets.tolist() == [0, *itertools.accumulate(map(len, items))]
    assert b.cumulative_metered().tolist() == list(itertools.accumulate(map(metered, recs)))


@pytest.mark.parametrize("n", [5, 40])
@pytest.mark.parametrize("at", ["first", "between", "last"])
def test_a_plain_batch_with_a_field_before_or_between_its_records(n: int, at: str) -> None:
    """match_seq_num placed before, between or after the body-only records (valid protobuf, though no
    serializer writes it so): the batch is kept plain and reads back as the canonical encodings, built in
    bulk and record by record."""
    recs = [Record(b"x%040d" % i) for i in range(n)]
    fields = list(pb.AppendInput(records=[pb.AppendRecord(body=r.body) for r in recs]).records)
    encoded_records = [b"\x0a" + varint(r.ByteSize()) + r.SerializeToString() for r in fields]
    place = {"first": 0, "between": n // 2, "last": n}[at]
    data = b"".join([*encoded_records[:place], b"\x10\x00", *encoded_records[place:]])
    stream = Stream("b", "s", CONFIG, 0.0)
    b = stream.sequence(data, arrival=1_000)
    stream.make_visible(stream.next_seq, stream.last_ts)
    assert b.plain
    got = stream.collect(0, 1000, 1 << 20, None)
    assert got.records == expected(recs, 0, [1_000] * n)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(body, min_size=1, max_size=40),
    st.sampled_from([None, b"\x10\x05", b"\x10\x0a", b"\x1a\x03tok", b"\x1a\x01\n"]),
    st.booleans(),
)
def test_records_found_by_their_keys_are_the_parsed_ones(
    bodies: list[bytes], field: bytes | None, first: bool
) -> None:
    """Found without a parse (`_lengths_by_keys`), a plain input's records are those the parse finds, or
    none are found: a byte 0x0a in a body, a length or a field other than the records, or a field before
    them, leaves it to the parse."""
    records = encoded([Record(b) for b in bodies])
    data = records if field is None else field + records if first else records + field
    parsed = [len(item) for item in RawList.FromString(data).items]
    found = _lengths_by_keys(data, len(bodies))
    assert found is None or found.tolist() == parsed
    if data.count(b"\n") == len(bodies) and data[:1] == b"\n":
        assert found is not None  # only the records' keys are 0x0a, and they lead
