"""Bulk ``AppendInput`` encoding: byte for byte what the SDK sends for the same records."""

from __future__ import annotations

import itertools
from contextlib import ExitStack
from dataclasses import dataclass
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from s2_sdk import AppendInput, Record
from s2_sdk._generated.s2.v1 import s2_pb2 as pb
from s2_sdk._mappers import append_input_to_proto

from s2_sink._wire.append import proto as append_proto
from s2_sink._wire.append.fields import pack_fields, varint_sizes
from s2_sink._wire.append.proto import encode_append_inputs, encode_records, fencing_token_field, record_field
from s2_sink.encoders import BODY, HEADERS, MAX_RECORD_BYTES, TIMESTAMP
from s2_sink.errors import EncodeError
from tests.hypothesis_profiles import examples

Header = tuple[bytes, bytes]
Row = tuple[bytes, list[Header] | None, int | None]

HEADER_TYPE = pa.struct([pa.field("name", pa.binary()), pa.field("value", pa.binary())])

# Lengths either side of the 1-, 2- and 3-byte varint limits, and records near S2's 1 MiB cap.
EDGE_SIZES = (127, 128, 16383, 16384, MAX_RECORD_BYTES - 64, MAX_RECORD_BYTES)

small_blobs = st.one_of(
    st.binary(max_size=24),
    st.text(max_size=8).map(str.encode),  # non-ASCII UTF-8
)
sized_blobs = st.builds(
    lambda size, seed: (seed * (size // len(seed) + 1))[:size],
    st.sampled_from(EDGE_SIZES),
    st.binary(min_size=1, max_size=7),
)
headers_lists = st.one_of(st.none(), st.lists(st.tuples(small_blobs, small_blobs), max_size=5))
# Cases carry near-1 MiB values on purpose.
BIG_DATA = [HealthCheck.too_slow, HealthCheck.data_too_large]

timestamps = st.one_of(st.none(), st.integers(0, 2**63 - 1), st.integers(0, 300))


@dataclass(frozen=True)
class Case:
    """A frame (as rows and as the Arrow columns built from them) and how to cut it into appends."""

    rows: list[Row]
    body: pa.Array
    headers: pa.Array | None
    timestamp: pa.Array | None
    bounds: list[int]
    fencing_token: str | None
    match_seq_nums: list[int | None] | None
    first_record_headers: list[list[Header]] | None


def list_array(entries: list[list[Header]], nulls: list[bool], large: bool) -> pa.Array:
    """``list<struct<name, value>>`` from per-row entries; null rows keep their (junk) entries behind them."""
    offsets = np.cumsum([0, *(len(e) for e in entries)])
    flat = [pair for row in entries for pair in row]
    values = pa.StructArray.from_arrays(
        [pa.array([n for n, _ in flat], pa.binary()), pa.array([v for _, v in flat], pa.binary())],
        fields=list(HEADER_TYPE),
    )
    cls = pa.LargeListArray if large else pa.ListArray
    return cls.from_arrays(
        pa.array(offsets, pa.int64() if large else pa.int32()), values, mask=pa.array(nulls, pa.bool_())
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """Frames with empty and near-1 MiB bodies, many and binary headers, timestamps, sliced Arrow
    arrays (rows before and after the encoded range, a non-zero array offset), null header rows
    backed by entries, and any cut into appends."""
    n = draw(st.integers(0, 12))
    bodies = draw(st.lists(small_blobs, min_size=n, max_size=n))
    headers = draw(st.lists(headers_lists, min_size=n, max_size=n))
    stamps = draw(st.lists(timestamps, min_size=n, max_size=n))
    if n and draw(st.booleans()):  # one big body or header value, sometimes
        at = draw(st.integers(0, n - 1))
        if draw(st.booleans()):
            bodies[at] = draw(sized_blobs)
        else:
            headers[at] = [*(headers[at] or []), (draw(small_blobs), draw(sized_blobs))]
    if n and draw(st.booleans()):  # one row with many headers
        headers[draw(st.integers(0, n - 1))] = draw(
            st.lists(st.tuples(small_blobs, small_blobs), min_size=100, max_size=300)
        )
    with_headers, with_stamps = draw(st.booleans()), draw(st.booleans())
    if not with_headers:
        headers = [None] * n
    if not with_stamps:
        stamps = [None] * n

    lead, trail = draw(st.integers(0, 3)), draw(st.integers(0, 2))
    pad = lead + trail
    junk = draw(st.lists(st.tuples(small_blobs, small_blobs), min_size=pad, max_size=pad))
    junk_rows = [(b, [(b, b)], 1) for b, _ in junk]
    all_rows = junk_rows[:lead] + list(zip(bodies, headers, stamps, strict=True)) + junk_rows[lead:]
    large_body, large_list = draw(st.booleans()), draw(st.booleans())
    body = pa.array([r[0] for r in all_rows], pa.large_binary() if large_body else pa.binary())
    behind_nulls = draw(st.lists(st.tuples(small_blobs, small_blobs), max_size=2))
    header_col = list_array(
        [r[1] if r[1] is not None else behind_nulls for r in all_rows],
        [r[1] is None for r in all_rows],
        large_list,
    )
    stamp_col = pa.array([r[2] for r in all_rows], pa.int64())
    total = len(all_rows)
    body, header_col, stamp_col = (c.slice(lead, total - lead) for c in (body, header_col, stamp_col))
    # The encoded range may leave rows out at either end (after the slice above).
    rows_after = n + trail
    start = draw(st.integers(0, n))
    stop = draw(st.integers(start, n))
    inner = draw(st.sets(st.integers(start + 1, stop - 1))) if stop - start > 1 else set()
    bounds = [start, *sorted(inner), stop] if stop > start else [start]
    chunks = len(bounds) - 1
    assert len(body) == rows_after
    return Case(
        rows=list(zip(bodies, headers, stamps, strict=True)),
        body=body,
        headers=header_col if with_headers else None,
        timestamp=stamp_col if with_stamps else None,
        bounds=bounds,
        fencing_token=draw(st.one_of(st.none(), st.text(max_size=12))),
        match_seq_nums=draw(
            st.one_of(
                st.none(),
                st.lists(st.one_of(st.none(), st.integers(0, 2**64 - 1)), min_size=chunks, max_size=chunks),
            )
        ),
        first_record_headers=draw(
            st.one_of(
                st.none(),
                st.lists(
                    st.lists(st.tuples(small_blobs, small_blobs), max_size=2),
                    min_size=chunks,
                    max_size=chunks,
                ),
            )
        ),
    )


def sdk_inputs(case: Case) -> list[AppendInput]:
    """The SDK inputs the current writer builds for the same rows: one ``Record`` per row, the extra
    headers appended after the first record's own (as ``partition_writer`` tags a chunk)."""
    inputs = []
    for c, (lo, hi) in enumerate(itertools.pairwise(case.bounds)):
        records = [Record(body, headers or [], stamp) for body, headers, stamp in case.rows[lo:hi]]
        if case.first_record_headers is not None:
            first = records[0]
            extra = case.first_record_headers[c]
            records[0] = Record(first.body, [*first.headers, *extra], first.timestamp)
        match = case.match_seq_nums[c] if case.match_seq_nums is not None else None
        inputs.append(AppendInput(records, match_seq_num=match, fencing_token=case.fencing_token))
    return inputs


def encode(case: Case) -> list[bytes]:
    return encode_append_inputs(
        case.body,
        case.headers,
        case.timestamp,
        np.array(case.bounds, dtype=np.int64),
        fencing_token=case.fencing_token,
        match_seq_nums=case.match_seq_nums,
        first_record_headers=case.first_record_headers,
    )


@settings(max_examples=examples(150, fast=30), deadline=None, suppress_health_check=BIG_DATA)
@given(cases(), st.sampled_from([None, 1, 3]))
def test_bytes_equal_the_sdk_serialization(case: Case, block_rows: int | None) -> None:
    """Every chunk's bytes equal the SDK's own serialization of the ``AppendInput`` it would send
    for those rows, and parse with the SDK's generated classes into that same message, however the
    chunks are grouped into encoding blocks."""
    with ExitStack() as limits:
        if block_rows is not None:
            limits.enter_context(patch.object(append_proto, "_BLOCK_ROWS", block_rows))
        ours = encode(case)
    expected = [append_input_to_proto(inp) for inp in sdk_inputs(case)]
    assert len(ours) == len(expected)
    for got, want in zip(ours, expected, strict=True):
        assert pb.AppendInput.FromString(got) == want
        assert got == want.SerializeToString()


@settings(max_examples=examples(100, fast=25), deadline=None, suppress_health_check=BIG_DATA)
@given(cases(), st.sampled_from([None, 1, 3]))
def test_rows_encoded_once_join_into_the_sdk_serialization(case: Case, block_rows: int | None) -> None:
    """The bulk writer's way: every row serialized once (`encode_records`), a chunk joined from its
    rows' bytes, its first record re-serialized in Python with the tag (`record_field`) and the token
    field added last: the SDK's own serialization of the ``AppendInput`` it would send."""
    with ExitStack() as limits:
        if block_rows is not None:
            limits.enter_context(patch.object(append_proto, "_BLOCK_ROWS", block_rows))
        data, offsets = encode_records(case.body, case.headers, case.timestamp)
    assert len(offsets) == len(case.body) + 1
    unmatched = Case(**{**case.__dict__, "match_seq_nums": None})
    for c, ((lo, hi), want) in enumerate(
        zip(itertools.pairwise(case.bounds), sdk_inputs(unmatched), strict=True)
    ):
        parts = [data[offsets[lo] : offsets[hi]].tobytes()]
        if case.first_record_headers is not None:
            body, headers, stamp = case.rows[lo]
            tagged = record_field(body, [*(headers or []), *case.first_record_headers[c]], stamp)
            parts = [tagged, data[offsets[lo + 1] : offsets[hi]].tobytes()]
        got = b"".join([*parts, fencing_token_field(case.fencing_token)])
        assert got == append_input_to_proto(want).SerializeToString()


@settings(max_examples=examples(60, fast=15), deadline=None, suppress_health_check=BIG_DATA)
@given(cases())
def test_parsed_records_are_the_rows(case: Case) -> None:
    """Read field by field (not through the SDK's mapping), each chunk holds its rows' bodies,
    headers (extra ones last on the first record) and timestamps, the token and the match."""
    for c, data in enumerate(encode(case)):
        msg = pb.AppendInput.FromString(data)
        lo, hi = case.bounds[c], case.bounds[c + 1]
        assert len(msg.records) == hi - lo
        for k, (rec, (body, headers, stamp)) in enumerate(zip(msg.records, case.rows[lo:hi], strict=True)):
            extra = case.first_record_headers[c] if case.first_record_headers and k == 0 else []
            assert rec.body == body
            assert [(h.name, h.value) for h in rec.headers] == [*(headers or []), *extra]
            assert rec.HasField("timestamp") == (stamp is not None)
            assert rec.timestamp == (stamp or 0)
        assert msg.HasField("fencing_token") == (case.fencing_token is not None)
        assert msg.fencing_token == (case.fencing_token or "")
        match = case.match_seq_nums[c] if case.match_seq_nums is not None else None
        assert msg.HasField("match_seq_num") == (match is not None)


@st.composite
def leading_cases(
    draw: st.DrawFn,
) -> tuple[Case, list[tuple[bytes, list[bytes]]], list[tuple[bytes, pa.Array]]]:
    """A `cases` frame with up to three leading headers: a name each (maybe empty) and per-row values
    (empty, binary, near 1 MiB; or one value in every row), as sliced binary or large_binary columns."""
    case = draw(cases())
    rows = len(case.body)
    leading_rows, leading_cols = [], []
    for _ in range(draw(st.integers(0, 3))):
        name = draw(small_blobs)
        if draw(st.booleans()):  # the same value in every row (as an upsert-only batch's @action)
            values = [draw(small_blobs)] * rows
        else:
            values = draw(
                st.lists(
                    st.one_of(small_blobs, sized_blobs) if rows < 3 else small_blobs,
                    min_size=rows,
                    max_size=rows,
                )
            )
        large = draw(st.booleans())
        column = pa.array([b"junk", *values], pa.large_binary() if large else pa.binary()).slice(1)
        leading_rows.append((name, values))
        leading_cols.append((name, column))
    return case, leading_rows, leading_cols


def with_leading(case: Case, leading: list[tuple[bytes, list[bytes]]]) -> Case:
    """`case` with each row's leading headers ahead of its own (what the SDK is given)."""
    rows = [
        (body, [(name, values[i]) for name, values in leading] + (headers or []), stamp)
        for i, (body, headers, stamp) in enumerate(case.rows)
    ]
    return Case(**{**case.__dict__, "rows": rows})


@settings(max_examples=examples(100, fast=25), deadline=None, suppress_health_check=BIG_DATA)
@given(leading_cases(), st.sampled_from([None, 1, 3]))
def test_leading_headers_equal_the_sdk_serialization(
    drawn: tuple[Case, list[tuple[bytes, list[bytes]]], list[tuple[bytes, pa.Array]]], block_rows: int | None
) -> None:
    """Leading headers (a name, a value column) come first in every record, before its own headers:
    every chunk, and every row encoded once then joined, is the SDK's serialization of records whose
    headers are the leading ones then their own."""
    case, leading_rows, leading = drawn
    expected = [append_input_to_proto(inp) for inp in sdk_inputs(with_leading(case, leading_rows))]
    with ExitStack() as limits:
        if block_rows is not None:
            limits.enter_context(patch.object(append_proto, "_BLOCK_ROWS", block_rows))
        ours = encode_append_inputs(
            case.body,
            case.headers,
            case.timestamp,
            np.array(case.bounds, dtype=np.int64),
            fencing_token=case.fencing_token,
            match_seq_nums=case.match_seq_nums,
            first_record_headers=case.first_record_headers,
            leading=leading,
        )
        data, offsets = encode_records(case.body, case.headers, case.timestamp, leading)
    assert [pb.AppendInput.FromString(got) for got in ours] == expected
    assert ours == [want.SerializeToString() for want in expected]
    unmatched = with_leading(
        Case(**{**case.__dict__, "first_record_headers": None, "match_seq_nums": None}), leading_rows
    )
    for (lo, hi), want in zip(itertools.pairwise(case.bounds), sdk_inputs(unmatched), strict=True):
        got = data[offsets[lo] : offsets[hi]].tobytes() + fencing_token_field(case.fencing_token)
        assert got == append_input_to_proto(want).SerializeToString()


def test_leading_headers_golden_bytes() -> None:
    """The upsert changelog pair as leading headers, ahead of a row's own header, in hand-checked bytes."""
    got = encode_append_inputs(
        pa.array([b"ab", b""]),
        pa.array([[(b"k", b"v")], None], pa.list_(HEADER_TYPE)),
        None,
        [0, 2],
        fencing_token=None,
        leading=[(b"@key", pa.array([b'{"id":1}', b'{"id":2}'])), (b"@action", pa.array([b"u", b"d"]))],
    )
    first = (
        b'\x12\x10\x0a\x04@key\x12\x08{"id":1}'  # @key
        b"\x12\x0c\x0a\x07@action\x12\x01u"  # @action
        b"\x12\x06\x0a\x01k\x12\x01v"  # the row's own header, after
        b"\x1a\x02ab"  # body
    )
    second = b'\x12\x10\x0a\x04@key\x12\x08{"id":2}\x12\x0c\x0a\x07@action\x12\x01d'  # empty body: none
    assert got == [b"\x0a" + bytes([len(first)]) + first + b"\x0a" + bytes([len(second)]) + second]


@pytest.mark.parametrize(
    "values",
    [
        [b"u", b"d", b"u"],  # one length: the same prefix bytes in every row
        [b'{"id":1}', b'{"id":22}', b"k" * 100],  # 1-byte lengths: fixed-width prefixes
        [b"", b"k" * 200, b"x"],  # an empty value, 2-byte lengths: packed field by field
        [b"", b"", b""],
    ],
)
def test_leading_header_of_each_value_shape_matches_the_sdk(values: list[bytes]) -> None:
    """However a leading header's prefix is laid out (by the lengths of its values), the records are the
    SDK's."""
    body = pa.array([b"a", b"", b"c"])
    got = encode_append_inputs(
        body, None, None, [0, 1, 3], fencing_token=None, leading=[(b"@key", pa.array(values))]
    )
    want = [
        append_input_to_proto(AppendInput([Record(b, [(b"@key", v)]) for b, v in rows])).SerializeToString()
        for rows in ([(b"a", values[0])], [(b"", values[1]), (b"c", values[2])])
    ]
    assert got == want


def test_null_leading_header_value_is_an_encode_error() -> None:
    """A null value of a leading header names the header and the row; a column of another length is
    refused."""
    body = pa.array([b"a", b"b"])
    with pytest.raises(EncodeError, match=r"leading header b'@key' has a null value in row 1"):
        encode_append_inputs(
            body, None, None, [0, 2], fencing_token=None, leading=[(b"@key", pa.array([b"x", None]))]
        )
    with pytest.raises(ValueError, match=rf"leading header b'@key' has 1 rows but {BODY} has 2"):
        encode_records(body, None, None, [(b"@key", pa.array([b"x"]))])


def test_golden_bytes() -> None:
    """A two-chunk frame encodes to hand-checked protobuf bytes (independent of the SDK)."""
    headers = pa.array([[(b"k", b"v")], None], pa.list_(HEADER_TYPE))
    got = encode_append_inputs(
        pa.array([b"ab", b""]),
        headers,
        pa.array([5, None]),
        [0, 1, 2],
        fencing_token="tök",
        match_seq_nums=[300, None],
        first_record_headers=[[(b"@s2sink", b"1")], []],
    )
    record = (
        b"\x08\x05"  # timestamp 5
        b"\x12\x06\x0a\x01k\x12\x01v"  # header k=v
        b"\x12\x0c\x0a\x07@s2sink\x12\x011"  # the extra header, last
        b"\x1a\x02ab"  # body
    )
    token = b"\x1a\x04t\xc3\xb6k"
    assert got == [
        b"\x0a" + bytes([len(record)]) + record + b"\x10\xac\x02" + token,
        b"\x0a\x00" + token,  # an empty record is an empty message
    ]


def test_near_one_mib_record_matches_the_sdk() -> None:
    """A record at S2's 1 MiB cap (3-byte varint lengths) encodes as the SDK does."""
    body = bytes(range(256)) * (MAX_RECORD_BYTES // 256 - 1)
    got = encode_append_inputs(pa.array([body, b"x"]), None, None, [0, 2], fencing_token=None)
    want = append_input_to_proto(AppendInput([Record(body), Record(b"x")])).SerializeToString()
    assert got == [want]


def test_large_frame_in_many_blocks_matches_the_sdk() -> None:
    """A frame spanning many encoding blocks (by rows, and by bytes around 1 MiB bodies) encodes
    chunk for chunk as the SDK does."""
    rng = np.random.default_rng(7)
    rows = 40_000
    sizes = rng.integers(0, 200, rows)
    sizes[[5, 20_000, 20_001, 39_999]] = MAX_RECORD_BYTES - 100
    bodies = [bytes([i % 251]) * int(s) for i, s in enumerate(sizes)]
    headers = [[(b"@key", str(i).encode()), (b"@action", b"u")] if i % 3 else None for i in range(rows)]
    stamps = [int(t) if t % 5 else None for t in rng.integers(0, 2**41, rows)]
    bounds = np.unique(np.concatenate(([0, rows], rng.integers(1, rows, 60), [5, 6, 20_000, 20_001])))
    chunks = len(bounds) - 1
    matches = [i * 1000 if i % 2 else None for i in range(chunks)]
    tags = [[(b"@s2sink", f"1 abcdef01 1 2 3 0 {i} 9".encode())] for i in range(chunks)]
    got = encode_append_inputs(
        pa.array(bodies),
        pa.array(headers, pa.list_(HEADER_TYPE)),
        pa.array(stamps, pa.int64()),
        bounds,
        fencing_token="t",
        match_seq_nums=matches,
        first_record_headers=tags,
    )
    want = []
    for c, (lo, hi) in enumerate(itertools.pairwise(bounds.tolist())):
        records = [
            Record(b, h or [], t)
            for b, h, t in zip(bodies[lo:hi], headers[lo:hi], stamps[lo:hi], strict=True)
        ]
        records[0] = Record(records[0].body, [*records[0].headers, *tags[c]], records[0].timestamp)
        inp = AppendInput(records, match_seq_num=matches[c], fencing_token="t")
        want.append(append_input_to_proto(inp).SerializeToString())
    assert len(got) == len(want)
    assert all(g == w for g, w in zip(got, want, strict=True))


def test_negative_timestamp_is_refused_like_the_sdk() -> None:
    """The SDK refuses a negative timestamp (uint64 on the wire); so does the encoder, naming the row."""
    with pytest.raises(ValueError, match="out of range"):
        append_input_to_proto(AppendInput([Record(b"x", [], -1)]))
    with pytest.raises(EncodeError, match=rf"{TIMESTAMP} is -1 in row 1"):
        encode_append_inputs(pa.array([b"a", b"b"]), None, pa.array([0, -1]), [0, 2], fencing_token=None)


def test_null_timestamps_mask_negative_junk() -> None:
    """Values behind a null timestamp are never read as timestamps."""
    stamps = pa.Array.from_buffers(
        pa.int64(), 2, [pa.py_buffer(np.array([0b01], np.uint8)), pa.py_buffer(np.array([7, -1], np.int64))]
    )
    got = encode_append_inputs(pa.array([b"a", b"b"]), None, stamps, [0, 2], fencing_token=None)
    want = append_input_to_proto(AppendInput([Record(b"a", [], 7), Record(b"b")])).SerializeToString()
    assert got == [want]


def test_null_body_is_an_encode_error() -> None:
    """A null body names the column and the row."""
    with pytest.raises(EncodeError, match=rf"{BODY} is null in row 2"):
        encode_append_inputs(pa.array([b"a", b"b", None]), None, None, [0, 3], fencing_token=None)


def test_null_header_value_is_an_encode_error() -> None:
    """A null header name or value names the column and the row."""
    headers = pa.array([[(b"k", b"v")], None, [(b"k", b"v"), (b"k", None)]], pa.list_(HEADER_TYPE))
    with pytest.raises(EncodeError, match=rf"{HEADERS} has a null header value in row 2"):
        encode_append_inputs(pa.array([b"a", b"b", b"c"]), headers, None, [0, 3], fencing_token=None)


@pytest.mark.parametrize(
    ("bounds", "match"),
    [
        ([0, 2, 2], "increase strictly"),
        ([1, 0], "increase strictly"),
        ([0, 4], r"within \[0, 3\]"),
        ([-1, 2], r"within \[0, 3\]"),
        ([[0, 3]], "1-D"),
        ([0.0, 3.0], "1-D"),
    ],
)
def test_bad_bounds_are_refused(bounds: object, match: str) -> None:
    """Bounds outside the frame, empty chunks and non-integer bounds raise ValueError."""
    with pytest.raises(ValueError, match=match):
        encode_append_inputs(pa.array([b"a", b"b", b"c"]), None, None, bounds, fencing_token=None)  # type: ignore[arg-type]


def test_columns_of_the_wrong_type_or_length_are_refused() -> None:
    """Columns that are not the frame's types, or not as long as the body column, raise naming them."""
    body = pa.array([b"a", b"b"])
    with pytest.raises(TypeError, match=rf"{BODY} must be binary"):
        encode_append_inputs(pa.array([1, 2]), None, None, [0, 2], fencing_token=None)
    with pytest.raises(TypeError, match=rf"{HEADERS} must be list<struct"):
        encode_append_inputs(body, pa.array([[b"x"], []]), None, [0, 2], fencing_token=None)
    with pytest.raises(TypeError, match=rf"{TIMESTAMP} must be an integer"):
        encode_append_inputs(body, None, pa.array([1.5, 2.5]), [0, 2], fencing_token=None)
    with pytest.raises(ValueError, match=rf"{HEADERS} has 1 rows but {BODY} has 2"):
        encode_append_inputs(body, pa.array([None], pa.list_(HEADER_TYPE)), None, [0, 2], fencing_token=None)
    with pytest.raises(ValueError, match=rf"{TIMESTAMP} has 3 rows but {BODY} has 2"):
        encode_append_inputs(body, None, pa.array([None] * 3, pa.int64()), [0, 2], fencing_token=None)


def test_null_typed_columns_mean_none_set() -> None:
    """Headers and timestamp columns of Arrow's null type (all rows null) add nothing to the records."""
    nulls = pa.nulls(2)
    got = encode_append_inputs(pa.array([b"a", b""]), nulls, nulls, [0, 2], fencing_token=None)
    assert got == [append_input_to_proto(AppendInput([Record(b"a"), Record(b"")])).SerializeToString()]


def test_per_chunk_arguments_must_match_the_chunks() -> None:
    """``match_seq_nums`` and ``first_record_headers`` need one entry per chunk."""
    body = pa.array([b"a", b"b"])
    with pytest.raises(ValueError, match="one entry per chunk"):
        encode_append_inputs(body, None, None, [0, 1, 2], fencing_token=None, match_seq_nums=[1])
    with pytest.raises(ValueError, match="one entry per chunk"):
        encode_append_inputs(body, None, None, [0, 2], fencing_token=None, first_record_headers=[[], []])
    with pytest.raises(ValueError, match="unsigned 64-bit"):
        encode_append_inputs(body, None, None, [0, 2], fencing_token=None, match_seq_nums=[2**64])


@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.booleans()), max_size=20))
def test_packed_varint_fields_match_protobuf(rows: list[tuple[int, int, bool]]) -> None:
    """Varint sizes and packed key + varint fields (one in every row, one in some) agree with protobuf's own
    encoding of uint64 values."""
    first = np.array([a for a, _, _ in rows], dtype=np.uint64)
    second = np.array([b for _, b, _ in rows], dtype=np.uint64)
    present = np.array([p for _, _, p in rows], dtype=np.bool_)
    fields = [(None, 0x08, first, varint_sizes(first)), (present, 0x08, second, varint_sizes(second))]
    offsets, data = pack_fields(len(rows), fields)
    # AppendRecord.timestamp (key 0x08) is an optional uint64, so even 0 is written.
    want = [
        pb.AppendRecord(timestamp=a).SerializeToString()
        + (pb.AppendRecord(timestamp=b).SerializeToString() if p else b"")
        for a, b, p in rows
    ]
    assert [data[lo:hi].tobytes() for lo, hi in itertools.pairwise(offsets.tolist())] == want


@given(
    st.lists(st.tuples(st.integers(0, 2**64 - 1), st.booleans()), max_size=20),
    st.binary(min_size=1, max_size=6),
    st.binary(min_size=1, max_size=6),
)
def test_packed_literal_and_multibyte_key_fields(
    rows: list[tuple[int, bool]], literal: bytes, key: bytes
) -> None:
    """A field of key bytes alone (a constant header) and a field whose key is several bytes (a header's name
    and its value's key) pack as those bytes, then the varint protobuf writes, where present."""
    values = np.array([v for v, _ in rows], dtype=np.uint64)
    present = np.array([p for _, p in rows], dtype=np.bool_)
    fields = [(None, literal, None, None), (present, key, values, varint_sizes(values))]
    offsets, data = pack_fields(len(rows), fields)
    varints = [pb.AppendRecord(timestamp=v).SerializeToString()[1:] for v, _ in rows]  # less the 0x08 key
    want = [literal + (key + varint if p else b"") for varint, (_, p) in zip(varints, rows, strict=True)]
    assert [data[lo:hi].tobytes() for lo, hi in itertools.pairwise(offsets.tolist())] == want


def test_a_bad_match_seq_num_is_reported_before_a_bad_row() -> None:
    """An argument error names the argument, not the first bad row the encoding would meet."""
    with pytest.raises(ValueError, match=r"match_seq_nums\[0\] is -1"):
        append_proto.encode_append_inputs(
            pa.array([b"a", None]), None, None, [0, 2], fencing_token=None, match_seq_nums=[-1]
        )


def test_match_seq_nums_may_be_any_sequence_of_per_chunk_values() -> None:
    out = append_proto.encode_append_inputs(
        pa.array([b"a", b"b"]), None, None, [0, 1, 2], fencing_token=None, match_seq_nums=np.array([1, 2])
    )
    assert [o.hex() for o in out] == ["0a031a01611001", "0a031a01621002"]
