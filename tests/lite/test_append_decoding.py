"""The lite server's decoding of an ``AppendInput`` decides what S2's rules decide for what the protobuf
module parses: each record stored as the canonical ``SequencedRecord`` encoding of its headers and body, its
metered size, client timestamp and command, the input's conditions, or the error (400 for what protobuf
refuses, 422 for limits and bad commands), whatever the layout of the bytes (over-long varints, fields out of
order or repeated, unknown fields, empty fields written out, damaged bytes). S2's rules: s2-lite
api/src/v1/stream/proto/mod.rs (AppendInput), common/src/stream.rs (AppendRecordBatch),
common/src/record/mod.rs and command.rs (Record::try_from_parts)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from hypothesis import given, settings
from hypothesis import strategies as st
from s2_sdk import AppendInput, CommandRecord, Record
from s2_sdk._mappers import append_input_to_proto

from s2_sink.lite._api_errors import ApiError
from s2_sink.lite._append_input import ONE_MIB, parse_input
from s2_sink.lite._wire import pb, varint

blobs = st.one_of(
    st.binary(max_size=20),
    st.text(max_size=6).map(str.encode),
    st.binary(min_size=120, max_size=300),
    st.just(b"x" * 16390),
)
names = st.one_of(st.binary(min_size=1, max_size=12), st.just(b"n" * 128), st.just(b""))
records = st.one_of(
    st.builds(
        Record, blobs, st.lists(st.tuples(names, blobs), max_size=4), st.none() | st.integers(0, 2**64 - 1)
    ),
    st.builds(Record, blobs),
    st.sampled_from([CommandRecord.fence("f-1"), CommandRecord.trim(3), CommandRecord.fence("")]),
)


def encoded(recs: list[Any], msn: int | None = None, token: str | None = None) -> bytes:
    data: bytes = append_input_to_proto(
        AppendInput(recs, match_seq_num=msn, fencing_token=token)
    ).SerializeToString()
    return data


def field(key: int, value: bytes, *, overlong: bool = False) -> bytes:
    """A length-delimited field, its length written one byte longer than needed if `overlong`."""
    length = varint(len(value))
    if overlong:
        length = bytes([*length[:-1], length[-1] | 0x80, 0])
    return bytes([key]) + length + value


def outcome(data: bytes) -> Any:
    """What `parse_input` decides: each record's stored part and metered size, the commands, the client
    timestamps and the conditions, or the error's status and code."""
    try:
        p = parse_input(data)
    except ApiError as exc:
        return ("error", exc.status, exc.code)
    return (p.parts, p.sizes, p.commands, p.client_ts, p.match_seq_num, p.fencing_token)


def rules(data: bytes) -> Any:
    """What S2's rules decide for the input as the protobuf module parses it (unknown fields dropped, as S2
    keeps none), written out from messages: the oracle `outcome` is held to."""
    try:
        inp = pb.AppendInput.FromString(data)
    except DecodeError:
        return ("error", 400, "bad_proto")
    inp.DiscardUnknownFields()
    if not 1 <= len(inp.records) <= 1000:
        return ("error", 422, "invalid")
    parts, sizes, commands, stamps = [], [], [], {}
    for i, rec in enumerate(inp.records):
        names = [h.name for h in rec.headers]
        if b"" in names:
            if len(names) != 1:
                return ("error", 422, "invalid")
            commands.append((i, rec.headers[0].value, rec.body))
        sizes.append(8 + len(rec.body) + sum(2 + len(h.name) + len(h.value) for h in rec.headers))
        if sizes[-1] > ONE_MIB:
            return ("error", 422, "invalid")
        parts.append(pb.SequencedRecord(headers=rec.headers, body=rec.body).SerializeToString())
        if rec.HasField("timestamp"):
            stamps[i] = rec.timestamp
    if sum(sizes) > ONE_MIB:
        return ("error", 422, "invalid")
    for _, op, body in commands:
        fence_ok = len(body) <= 36 and body.decode(errors="replace").encode() == body
        if not ((op == b"fence" and fence_ok) or (op == b"trim" and len(body) == 8)):
            return ("error", 422, "invalid")
    msn = inp.match_seq_num if inp.HasField("match_seq_num") else None
    token = inp.fencing_token if inp.HasField("fencing_token") else None
    if token is not None and len(token.encode()) > 36:  # common/src/record/fencing.rs, FencingToken
        return ("error", 422, "invalid")
    return (parts, sizes, commands, stamps, msn, token)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(records, min_size=1, max_size=30),
    st.none() | st.integers(0, 2**64 - 1),
    st.none() | st.text(max_size=10) | st.text(min_size=30, max_size=40),
)
def test_any_input_is_decided_by_the_rules(recs: list[Any], msn: int | None, token: str | None) -> None:
    """SDK-serialized inputs: bodies of every length class, headers (binary, non-ASCII, empty values, names of
    one and two length bytes, empty names), timestamps, commands, conditions."""
    data = encoded(recs, msn, token)
    assert outcome(data) == rules(data)


_BYTES = st.one_of(
    st.integers(0, 255), st.sampled_from([0x00, 0x08, 0x0A, 0x10, 0x12, 0x1A, 0x22, 0x80, 0x81])
)
upsert = [Record(b"b%d" % i * 20, [(b"@key", b'{"id":%d}' % i), (b"@action", b"u")]) for i in range(6)]


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), _BYTES, st.sampled_from(["set", "insert", "delete"])), max_size=3
    ),
    st.booleans(),
)
def test_damaged_inputs_are_decided_by_the_rules(edits: list[tuple[int, int, str]], trailer: bool) -> None:
    """An upsert batch with a few bytes changed, inserted or removed anywhere (keys, lengths, the trailer):
    what still parses is decided by the rules, the rest refused as malformed (400)."""
    data = bytearray(encoded(upsert, msn=7 if trailer else None, token="tok" if trailer else None))
    for where, byte, how in edits:
        at = where % (len(data) + 1)
        if how == "insert":
            data.insert(at, byte)
        elif at < len(data):
            if how == "set":
                data[at] = byte
            else:
                del data[at]
    assert outcome(bytes(data)) == rules(bytes(data))


def _record(i: int) -> bytes:
    return (
        field(0x12, field(0x0A, b"@key") + field(0x12, b"%d" % i))
        + field(0x12, field(0x0A, b"@action") + field(0x12, b"u"))
        + field(0x1A, b"x")
    )


ODD_RECORDS = {
    "over-long record length": field(0x0A, _record(0), overlong=True),
    "over-long empty record": field(0x0A, b"", overlong=True),
    "over-long header length": field(
        0x0A, field(0x12, field(0x0A, b"@key"), overlong=True) + field(0x1A, b"x")
    ),
    "over-long name length": field(
        0x0A, field(0x12, field(0x0A, b"@key", overlong=True)) + field(0x1A, b"x")
    ),
    "over-long body length": field(
        0x0A, field(0x12, field(0x0A, b"@key")) + field(0x1A, b"x", overlong=True)
    ),
    "over-long body-only length": field(0x0A, b"\x1a\x81\x00x"),
    "empty body written out": field(0x0A, field(0x12, field(0x0A, b"@key")) + b"\x1a\x00"),
    "empty body-only record written out": field(0x0A, b"\x1a\x00"),
    "timestamp, empty body": field(0x0A, b"\x08\x05\x1a\x00"),
    "empty value written out": field(0x0A, b"\x12\x05\x0a\x01k\x12\x00" + field(0x1A, b"x")),
    "body before headers": field(0x0A, b"\x1a\x01x" + b"\x12\x06\x0a\x01k\x12\x01v"),
    "value before name": field(0x0A, b"\x12\x06\x12\x01v\x0a\x01k" + b"\x1a\x01x"),
    "timestamp after a header": field(0x0A, b"\x12\x03\x0a\x01k" + b"\x08\x05"),
    "body twice": field(0x0A, b"\x1a\x01x\x1a\x01y"),
    "unknown record field": field(0x0A, _record(0) + b"\x28\x01"),
    "unknown header field": field(0x0A, field(0x12, field(0x0A, b"k") + b"\x3a\x01z") + field(0x1A, b"x")),
    "empty header name": field(0x0A, field(0x12, field(0x0A, b"") + field(0x12, b"v")) + field(0x1A, b"x")),
}


@pytest.mark.parametrize("at", [0, 1, 5, 9])
@pytest.mark.parametrize("odd", list(ODD_RECORDS))
def test_records_in_other_layouts_are_stored_canonical(odd: str, at: int) -> None:
    """A record in a layout no serializer writes (first, second, in the middle, last of an upsert batch) is
    stored as a serializer writes its ``SequencedRecord``, so reads serve canonical bytes (S2 re-encodes
    what it stores)."""
    recs = [field(0x0A, _record(i)) for i in range(10)]
    recs[at] = ODD_RECORDS[odd]
    data = b"".join(recs) + b"\x10\x07"
    got = outcome(data)
    assert got == rules(data)
    if got[0] != "error":
        assert all(pb.SequencedRecord.FromString(p).SerializeToString() == p for p in got[0])


@pytest.mark.parametrize(
    "placed",
    [
        {0: b"\x10\x07"},
        {5: b"\x10\x07"},
        {0: b"\x1a\x03tok", 10: b"\x10\x07"},
        {3: b"\x1a\x03tok", 7: b"\x10\x07"},
        {0: b"\x10\x05", 10: b"\x10\x07"},  # match_seq_num twice: the last one counts
        {10: b"\x10\x87\x00"},  # an over-long match_seq_num
        {4: b"\x1a\x02no", 10: b"\x1a\x03tok"},
        {10: b"\x22\x01z"},  # an unknown field
    ],
)
def test_conditions_placed_anywhere_are_read_as_protobuf_reads_them(placed: dict[int, bytes]) -> None:
    """match_seq_num and fencing_token before, between or after the records, once or twice, and unknown
    input fields: the same records, and the last of a repeated condition counts."""
    fields = [field(0x0A, _record(i)) for i in range(10)]
    for at in sorted(placed, reverse=True):
        fields.insert(at, placed[at])
    data = b"".join(fields)
    got = outcome(data)
    assert got == rules(data)
    assert len(got[0]) == 10


@pytest.mark.parametrize("trailer", [b"\x1a\x01\xff", b"\x10", b"\x0a\x05\x1a"])
def test_malformed_input_is_400(trailer: bytes) -> None:
    """A fencing token that is not UTF-8, a field cut short, a record past the end: 400 ``bad_proto``."""
    with pytest.raises(ApiError) as err:
        parse_input(encoded(upsert) + trailer)
    assert (err.value.status, err.value.code) == (400, "bad_proto")
    assert str(err.value).startswith("invalid AppendInput: Error parsing message")


# 8 + 2 * 2 + 13 metered bytes with the body's; one header has no value.
_KEYED = [(b"@key", b"k1"), (b"@action", b"")]


@pytest.mark.parametrize(
    ("recs", "error"),
    [
        ([Record(b"b" * (ONE_MIB - 25), _KEYED)], None),
        ([Record(b"b" * (ONE_MIB - 24), _KEYED)], "record 0 is 1048577 metered bytes, more than 1 MiB"),
        ([Record(b"b" * (ONE_MIB - 8))], None),
        ([Record(b"b" * (ONE_MIB - 7))], "record 0 is 1048577 metered bytes, more than 1 MiB"),
        ([Record(b"b" * 1000, _KEYED), Record(b"b" * (ONE_MIB - 1050), _KEYED)], None),
        (
            [Record(b"b" * 1000, _KEYED), Record(b"b" * (ONE_MIB - 1049), _KEYED)],
            "a batch may hold at most 1 MiB of metered bytes, got 1048577",
        ),
        ([Record(b"b" * 10, _KEYED), Record(b"b" * (ONE_MIB - 24), _KEYED)], "record 1 is 1048577 metered"),
        ([Record(b"", _KEYED)] * 999 + [Record(b"b" * (ONE_MIB - 25 * 1000), _KEYED)], None),
        ([Record(b"x")] * 1001, "a batch must have 1 to 1000 records, got 1001"),
        ([Record(b"x" * 37, [(b"", b"fence")])], "fencing token must be at most 36 bytes, got 37"),
        ([Record(b"\xff", [(b"", b"fence")])], "fencing token must be UTF-8"),
        ([Record(b"1234567", [(b"", b"trim")])], "trim command body must be an 8-byte big-endian seq_num"),
        ([Record(b"x", [(b"", b"nope")])], "unknown command record b'nope'"),
        ([Record(b"x", [(b"", b"fence"), (b"k", b"v")])], "header name must not be empty"),
    ],
)
def test_limits_and_commands_hold_to_the_byte(recs: list[Record], error: str | None) -> None:
    """Records at and a byte past the 1 MiB limits (of a record, with headers or body only, and of a batch),
    the 1000-record limit, and bad command records: taken, or refused with 422 and what was wrong."""
    data = encoded(recs)
    if error is None:
        assert sum(parse_input(data).sizes) == ONE_MIB
        return
    with pytest.raises(ApiError) as err:
        parse_input(data)
    assert (err.value.status, err.value.code) == (422, "invalid")
    assert str(err.value).startswith(error)
