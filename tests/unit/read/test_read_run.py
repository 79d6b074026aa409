"""Read batches taken in one by one and decoded together: the records each would give alone, in order."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from s2_sdk import SequencedRecord

from s2_sink._read.session import missing
from s2_sink._wire.read_batch import ReadRun, Tail, decode_held, parse_read_batch
from tests.hypothesis_profiles import examples
from tests.unit.wire.test_read_batch import _as_records, _message, small_blobs, tails


def _out_of_order(recs: list[SequencedRecord]) -> bytes:
    """A valid ReadBatch that serializers do not write: each record's body before its seq_num."""
    out = b""
    for r in recs:
        body = bytes([0x22, len(r.body)]) + r.body
        fields = body + _message([SequencedRecord(r.seq_num, b"", [], r.timestamp)], None)[2:]
        out += bytes([0x0A, len(fields)]) + fields
    return out


layouts = st.sampled_from(["canonical", "out-of-order"])
# `records` without headers and with a body under 100 bytes, drawn as such: filtering `records` rejects most
# draws, which a derandomized run's health check refuses.
small = st.builds(
    SequencedRecord,
    seq_num=st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)),
    body=small_blobs,
    headers=st.just([]),
    timestamp=st.one_of(st.integers(0, 300), st.integers(0, 2**64 - 1)),
)


@settings(max_examples=examples(150, fast=30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.lists(small, max_size=6), tails, layouts), min_size=1, max_size=6))
def test_a_run_holds_what_each_message_gives_alone(
    messages: list[tuple[list[SequencedRecord], Tail | None, str]],
) -> None:
    """Messages of any layout (canonical ones decoded together, others parsed on arrival), with or without
    records, seq_num 0 (left out on the wire) or beyond 2**56, give the records each gives alone, in
    order; each arrival reports its count, its last seq_num and its tail."""
    run = ReadRun()
    expected: list[SequencedRecord] = []
    for recs, tail, layout in messages:
        message = _message(recs, tail) if layout == "canonical" or not recs else _out_of_order(recs)
        arrival = run.add(message)
        alone, alone_tail = parse_read_batch(message)
        assert arrival.records == len(alone)
        assert arrival.last_seq_num == (int(alone.seq_nums[-1]) if len(alone) else None)
        assert arrival.tail == alone_tail
        expected.extend(_as_records(alone))
    assert run.records == len(expected)
    if expected:
        (columns,) = decode_held([run.take()])
        assert _as_records(columns) == expected
        assert run.records == run.size == 0


def test_messages_are_walked_on_arrival_and_parsed_at_once_if_the_walk_cannot_read_them() -> None:
    """Messages whose top level is records then a tail are held walked (decoded at take; one whose records
    are not in field order is then parsed, message by message); seq_num 0, which the wire leaves out, is
    read as 0. A message with its tail before its records is parsed on arrival."""
    recs = [SequencedRecord(i, b"x", [], 5) for i in range(5)]
    run = ReadRun()
    assert run.add(_message(recs[:1], None)).last_seq_num == 0
    assert run.add(_out_of_order(recs[1:3])).last_seq_num == 2
    tail_first = _message([], Tail(9, 9)) + _message(recs[3:], None)
    assert run.add(tail_first) == (2, 4, Tail(9, 9))
    assert [type(p).__name__ for p in run._parts] == ["Skim", "Skim", "RecordColumns"]
    (columns,) = decode_held([run.take()])
    assert _as_records(columns) == recs


@given(st.sets(st.integers(0, 200), min_size=1), st.integers(0, 200), st.integers(0, 250))
def test_missing_seq_nums_are_the_jumps_before_stop(seqs: set[int], expected: int, stop: int) -> None:
    got = sorted(seqs)
    expected = min(expected, got[0])
    want, at = [], expected
    for s in got:
        if s > at and at < stop:
            want.append((at, min(s, stop)))
        at = s + 1
    assert missing(np.array(got, dtype=np.uint64), expected, stop) == want


headed = st.builds(  # with headers (command records among them), small bodies: many draws stay fast
    SequencedRecord,
    seq_num=st.integers(0, 2**64 - 1),
    body=small_blobs,
    headers=st.lists(st.tuples(small_blobs, small_blobs), max_size=3),
    timestamp=st.integers(0, 2**64 - 1),
)


@settings(max_examples=examples(150, fast=30), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.lists(st.tuples(st.lists(headed, min_size=1, max_size=4), layouts), min_size=1, max_size=3),
        min_size=1,
        max_size=5,
    )
)
def test_runs_decoded_together_give_each_runs_records(
    runs: list[list[tuple[list[SequencedRecord], str]]],
) -> None:
    """Runs of several streams decoded in one go (walked messages joined across runs, parsed ones between
    them) are cut back into each run's records, headers included; each run knows its count and last
    seq_num before it is decoded."""
    held, expected = [], []
    for messages in runs:
        run = ReadRun()
        records = []
        for drawn, layout in messages:
            recs = drawn
            if layout != "canonical":  # this layout is written without headers
                recs = [SequencedRecord(r.seq_num, r.body, [], r.timestamp) for r in drawn]
            run.add(_message(recs, None) if layout == "canonical" else _out_of_order(recs))
            records.extend(recs)
        held.append(run.take())
        expected.append(records)
    decoded = decode_held(held)
    assert [_as_records(columns) for columns in decoded] == expected
    assert [(h.records, h.last_seq_num) for h in held] == [(len(e), e[-1].seq_num) for e in expected]
