"""The lite server's bulk read of appended records (`_record_scan`) decides exactly what the
record-by-record decoding decides: the same stored records, timestamps and metering errors; inputs it does
not read in bulk (command records, other layouts) fall back to that decoding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from s2_sdk import AppendInput, CommandRecord, Record
from s2_sdk._mappers import append_input_to_proto

from s2_sink.lite._append_input import _record_by_record, _trailer_size, parse_input
from s2_sink.lite._errors import ApiError
from s2_sink.lite._record_scan import scan_records
from s2_sink.lite._uniform_scan import scan_uniform
from s2_sink.lite._wire import RawList, pb

blobs = st.one_of(
    st.binary(max_size=20), st.text(max_size=6).map(str.encode), st.binary(min_size=120, max_size=300)
)
headers = st.lists(st.tuples(st.binary(min_size=1, max_size=12), blobs), max_size=4)
records = st.builds(Record, blobs, headers, st.one_of(st.none(), st.integers(0, 2**64 - 1)))


def record_by_record(data: bytes) -> Any:
    """The decoding the server used for every input with headers or timestamps before the scan."""
    full = pb.AppendInput.FromString(data)
    msn = full.match_seq_num if full.HasField("match_seq_num") else None
    token = full.fencing_token if full.HasField("fencing_token") else None
    items = RawList.FromString(data).items
    return _record_by_record(items, len(items), msn, token)


def outcome(parse: Any, data: bytes) -> Any:
    """What a parse decides: the stored records (whichever form keeps them), commands, timestamps and
    conditions, or the error."""
    try:
        p = parse(data)
    except ApiError as exc:
        return ("error", exc.status, exc.code, str(exc))
    return (p.n, p.tails(), p.commands, p.client_ts, p.match_seq_num, p.fencing_token)


def lengths(data: bytes) -> Any:
    items = RawList.FromString(data).items
    return np.fromiter(map(len, items), dtype=np.int64, count=len(items))


def serialized(recs: list[Record], msn: int | None = None, token: str | None = None) -> bytes:
    data: bytes = append_input_to_proto(
        AppendInput(recs, match_seq_num=msn, fencing_token=token)
    ).SerializeToString()
    return data


@settings(max_examples=300, deadline=None)
@given(
    st.lists(records, min_size=1, max_size=30),
    st.one_of(st.none(), st.integers(0, 2**64 - 1)),
    st.one_of(st.none(), st.text(max_size=10)),
)
def test_bulk_scan_equals_record_by_record(recs: list[Record], msn: int | None, token: str | None) -> None:
    """SDK-serialized inputs with headers (binary, non-ASCII, empty values), timestamps, a trailer: read
    in bulk, and stored exactly as record by record."""
    assume(any(r.headers or r.timestamp is not None for r in recs))  # else the plain path serves
    data = serialized(recs, msn, token)
    assert outcome(parse_input, data) == outcome(record_by_record, data)
    assert scan_records(data, lengths(data), _trailer_size(msn, token)) is not None


@pytest.mark.parametrize(
    "recs",
    [
        [Record(b"x", [(b"k", b"v")]), CommandRecord.fence("tok"), Record(b"y")],
        [CommandRecord.trim(5)],
        [Record(b"a" * (1024 * 1024 - 20), [(b"k", b"v")])],
        [Record(b"a" * 600_000, [(b"k", b"v")]), Record(b"b" * 600_000, [(b"k", b"v")])],
        [Record(b"a" * 600_000, [], 5), Record(b"b" * 600_000)],
    ],
)
def test_commands_and_limits_decide_alike(recs: list[Record]) -> None:
    """Command records go record by record; oversized records and batches are refused alike."""
    data = serialized(recs)
    assert outcome(parse_input, data) == outcome(record_by_record, data)


@pytest.mark.parametrize(
    "record",
    [
        b"\x1a\x01x" + b"\x12\x06\x0a\x01k\x12\x01v",  # body before headers
        b"\x12\x06\x12\x01v\x0a\x01k" + b"\x1a\x01x",  # a header's value before its name
        b"\x12\x03\x0a\x01k" + b"\x08\x05",  # timestamp after a header
        b"\x1a\x01x\x1a\x01y",  # body twice (the last one wins)
        b"\x12\x05\x0a\x01k\x12\x00",  # an empty value written out
    ],
)
def test_other_layouts_fall_back(record: bytes) -> None:
    """Valid protobuf in another layout than the canonical one: the scan declines, and the records
    stored are those of the record-by-record decoding."""
    data = b"\x0a" + bytes([len(record)]) + record
    assert scan_records(data, lengths(data), 0) is None
    assert outcome(parse_input, data) == outcome(record_by_record, data)


# -- batches of one leading layout (an upsert batch's): the uniform shortcut ---------------------------------

#: Header name lengths of a uniform batch: an upsert's (@key, @action), one header, names of other lengths.
name_lengths = st.sampled_from([(4, 7), (1,), (3, 3, 12), (9, 2)])


@st.composite
def uniform_batches(draw: st.DrawFn) -> list[Record]:
    """Records sharing one leading layout: the same number of headers with names of the same lengths (any
    bytes), values of 1 to 100 bytes, bodies of 1 to 400 bytes (one- and two-byte lengths)."""
    lens = draw(name_lengths)
    n = draw(st.integers(1, 40))
    body_sizes = draw(st.sampled_from([(1, 120), (130, 400), (1, 400)]))
    out = []
    for _ in range(n):
        names = [draw(st.binary(min_size=k, max_size=k)) for k in lens]
        hdrs = [(name, draw(st.binary(min_size=1, max_size=100))) for name in names]
        out.append(Record(draw(st.binary(min_size=body_sizes[0], max_size=body_sizes[1])), hdrs))
    return out


#: Records unlike the others: a name of another length, a header without a value, no body, a timestamp, a
#: command record, an extra header, a header of two-byte length, a body of 16 KiB.
odd_records = st.sampled_from(
    [
        Record(b"x", [(b"k" * 5, b"v"), (b"a" * 7, b"u")]),
        Record(b"x", [(b"k" * 4, b""), (b"a" * 7, b"u")]),
        Record(b"", [(b"k" * 4, b"v"), (b"a" * 7, b"u")]),
        Record(b"x", [(b"k" * 4, b"v"), (b"a" * 7, b"u")], 12345),
        CommandRecord.fence("tok"),
        Record(b"x", [(b"k" * 4, b"v"), (b"a" * 7, b"u"), (b"e", b"f")]),
        Record(b"x", [(b"k" * 4, b"v" * 200), (b"a" * 7, b"u")]),
        Record(b"x" * 16_500, [(b"k" * 4, b"v"), (b"a" * 7, b"u")]),
        Record(b"x"),
    ]
)


def uniform_scan_of(data: bytes) -> Any:
    """What the shortcut reads of an encoded input whose records lead it (None if it declines)."""
    d = np.zeros(len(data) + 272, dtype=np.uint8)
    d[: len(data)] = np.frombuffer(data, dtype=np.uint8)
    ln = lengths(data)
    size = np.searchsorted(np.array([1 << (7 * k) for k in range(1, 9)]), ln, side="right") + 1
    end = np.cumsum(1 + size + ln)
    return scan_uniform(data, d, end - ln, end)


@settings(max_examples=200, deadline=None)
@given(uniform_batches(), st.one_of(st.none(), st.text(max_size=10)))
def test_uniform_batches_take_the_shortcut(recs: list[Record], token: str | None) -> None:
    """Records of one leading layout are read by the shortcut, and stored exactly as record by record."""
    data = serialized(recs, None, token)
    scan = uniform_scan_of(data)
    assert scan is not None
    assert scan.metered.tolist() == [
        8 + len(r.body) + sum(2 + len(k) + len(v) for k, v in r.headers) for r in recs
    ]
    assert outcome(parse_input, data) == outcome(record_by_record, data)


@settings(max_examples=200, deadline=None)
@given(uniform_batches(), odd_records, st.data())
def test_a_record_unlike_the_others_is_read_alike(
    recs: list[Record], odd: Record, data: st.DataObject
) -> None:
    """One record of another layout anywhere in a uniform batch (first, middle, last): the shortcut
    declines and the batch is stored (or refused) exactly as record by record."""
    recs.insert(data.draw(st.integers(0, len(recs))), odd)
    encoded = serialized(recs)
    assert uniform_scan_of(encoded) is None
    assert outcome(parse_input, encoded) == outcome(record_by_record, encoded)


@settings(max_examples=400, deadline=None)
@given(uniform_batches(), st.data())
def test_a_changed_byte_is_read_alike(recs: list[Record], data: st.DataObject) -> None:
    """Any byte of a uniform batch changed (a key, a length, a varint made over-long...): the input is
    refused as malformed if protobuf cannot parse it, else stored exactly as record by record."""
    encoded = bytearray(serialized(recs))
    at = data.draw(st.integers(0, len(encoded) - 1))
    encoded[at] = data.draw(st.integers(0, 255))
    changed = bytes(encoded)
    try:
        parsed = pb.AppendInput.FromString(changed)
    except DecodeError:
        with pytest.raises(ApiError) as err:
            parse_input(changed)
        assert err.value.status == 400
        return
    assume(parsed.records)  # no records at all: refused before any decoding (not the oracle's business)
    assert outcome(parse_input, changed) == outcome(record_by_record, changed)
