"""Bulk ``ReadBatch`` decoding: exactly the records the SDK's own parse and mapping give."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from s2_sdk import SequencedRecord
from s2_sdk._generated.s2.v1 import s2_pb2 as pb
from s2_sdk._mappers import read_batch_from_proto

from s2_sink._wire import read_batch as _read_batch
from s2_sink._wire.columns import RecordColumns, concat_columns
from s2_sink._wire.read_batch import Tail, parse_read_batch
from tests.hypothesis_profiles import examples

Header = tuple[bytes, bytes]

# Lengths either side of the 1-, 2- and 3-byte varint limits, and a record near S2's 1 MiB cap.
EDGE_SIZES = (0, 127, 128, 16383, 16384, 1024 * 1024 - 64)

small_blobs = st.one_of(
    st.binary(max_size=24),
    st.text(max_size=8).map(str.encode),  # non-ASCII UTF-8
)
bodies = st.one_of(
    small_blobs,
    st.builds(
        lambda size, seed: (seed * (size // len(seed) + 1))[:size],
        st.sampled_from(EDGE_SIZES),
        st.binary(min_size=1, max_size=7),
    ),
)
records = st.builds(
    SequencedRecord,
    seq_num=st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)),
    body=bodies,
    headers=st.lists(st.tuples(small_blobs, small_blobs), max_size=6),
    timestamp=st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)),
)
tails = st.one_of(st.none(), st.builds(Tail, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1)))


def _message(recs: list[SequencedRecord], tail: Tail | None) -> bytes:
    batch = pb.ReadBatch()
    for r in recs:
        sr = batch.records.add(seq_num=r.seq_num, timestamp=r.timestamp, body=r.body)
        for name, value in r.headers:
            sr.headers.add(name=name, value=value)
    if tail is not None:
        batch.tail.seq_num, batch.tail.timestamp = tail
    return batch.SerializeToString()


def _as_records(cols: RecordColumns) -> list[SequencedRecord]:
    offsets = cols.header_offsets.tolist()
    names, values = cols.names.to_pylist(), cols.values.to_pylist()
    return [
        SequencedRecord(
            seq_num=seq,
            body=body,
            headers=list(
                zip(names[offsets[i] : offsets[i + 1]], values[offsets[i] : offsets[i + 1]], strict=True)
            ),
            timestamp=ts,
        )
        for i, (seq, ts, body) in enumerate(
            zip(cols.seq_nums.tolist(), cols.timestamps.tolist(), cols.bodies.to_pylist(), strict=True)
        )
    ]


def _sdk(message: bytes) -> tuple[list[SequencedRecord], Tail | None]:
    batch = pb.ReadBatch()
    batch.ParseFromString(message)
    mapped = read_batch_from_proto(batch)
    tail = None if mapped.tail is None else Tail(mapped.tail.seq_num, mapped.tail.timestamp)
    return mapped.records, tail


@settings(
    max_examples=examples(300, fast=50),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.lists(records, max_size=12), tails)
def test_bulk_decode_equals_the_sdk_parse(recs: list[SequencedRecord], tail: Tail | None) -> None:
    """Every serialized ReadBatch (empty bodies, bodies near 1 MiB, many and binary headers, empty
    header names and values, non-ASCII, 64-bit positions) decodes to the SDK's records and tail."""
    message = _message(recs, tail)
    cols, got_tail = parse_read_batch(message)
    assert (_as_records(cols), got_tail) == _sdk(message)
    assert _as_records(cols) == recs
    # What serializers write is read by the bulk walk itself, not by the fallback parser.
    skimmed = _read_batch.skim(message)
    assert skimmed is not None
    bulk_cols = _read_batch._decode(
        message, _read_batch._positions(skimmed.starts), _read_batch._positions(skimmed.ends)
    )
    assert _as_records(bulk_cols) == recs


@settings(max_examples=100, deadline=None)
@given(st.lists(records.filter(lambda r: len(r.body) < 1000), min_size=1, max_size=6), tails, tails)
def test_non_canonical_messages_still_decode_as_protobuf_does(
    recs: list[SequencedRecord], first_tail: Tail | None, second_tail: Tail | None
) -> None:
    """Two messages back to back are one valid ReadBatch (records concatenated, a record after the tail,
    the tail merged field by field): it decodes as the protobuf parser reads it."""
    half = len(recs) // 2
    message = _message(recs[:half], first_tail) + _message(recs[half:], second_tail)
    cols, got_tail = parse_read_batch(message)
    assert (_as_records(cols), got_tail) == _sdk(message)


def test_fields_out_of_number_order_decode_as_protobuf_does() -> None:
    """A record whose body precedes its seq_num (valid protobuf, not what serializers write) decodes to
    the same record."""
    record = bytes([0x22, 2]) + b"hi" + bytes([0x08, 7, 0x10, 9])
    message = bytes([0x0A, len(record)]) + record
    cols, tail = parse_read_batch(message)
    assert _as_records(cols) == [SequencedRecord(seq_num=7, body=b"hi", headers=[], timestamp=9)]
    assert tail is None


def test_commands_and_take_select_records() -> None:
    """Command records (one header with an empty name) are found by mask; take keeps the headers of the
    records it selects, in their order."""
    recs = [
        SequencedRecord(0, b"a", [(b"k", b"1"), (b"j", b"2")], 5),
        SequencedRecord(1, b"trim", [(b"", b"trim")], 6),
        SequencedRecord(2, b"", [], 7),
        SequencedRecord(3, b"c", [(b"x", b"")], 8),
    ]
    cols, _ = parse_read_batch(_message(recs, None))
    commands = cols.commands()
    assert commands.tolist() == [r.is_command_record() for r in recs]
    assert _as_records(cols.take(~commands)) == [recs[0], recs[2], recs[3]]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(records.filter(lambda r: len(r.body) < 1000), max_size=5), min_size=1, max_size=4))
def test_concatenated_columns_hold_every_batchs_records_in_order(
    batches: list[list[SequencedRecord]],
) -> None:
    """Columns of several batches joined into one give the records of all of them, batch after batch,
    each with its own headers."""
    parts = [parse_read_batch(_message(recs, None))[0] for recs in batches]
    assert _as_records(concat_columns(parts)) == [r for recs in batches for r in recs]
