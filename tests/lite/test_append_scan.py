"""The lite server's bulk read of appended records (`_record_scan`) decides exactly what the
record-by-record decoding decides: the same stored records, timestamps and metering errors; inputs it does
not read in bulk (command records, other layouts) fall back to that decoding."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from s2_sdk import AppendInput, CommandRecord, Record
from s2_sdk._mappers import append_input_to_proto

from s2_sink.lite._append_input import _record_by_record, _trailer_size, parse_input
from s2_sink.lite._errors import ApiError
from s2_sink.lite._record_scan import scan_records
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
