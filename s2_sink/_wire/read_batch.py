"""Serialized ``ReadBatch`` messages (s2.v1 protobuf) -> record columns, in bulk.

One Python loop walks the top level (`skim`: where each record lies); numpy reads the fields inside over
all records at once (`decode_skims`), assuming the layout serializers write (fields in number order,
proto3 defaults omitted), and Arrow packs bodies and headers from offsets into the message. A message in
any other layout is parsed by the SDK's generated class, so the result is always what
``pb.ReadBatch.ParseFromString`` gives. `read_varints` reads the eight bytes at each position as one
``uint64`` word (ten one-byte columns for a varint over eight bytes). A read holds the messages it
receives in runs (`ReadRun`) and decodes them together when they are handed on (`decode_held`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from s2_sink._transport.sdk import pb
from s2_sink._wire.columns import Bytes, Ints, RecordColumns, concat_columns, repeated, take

__all__ = ["Arrival", "Held", "NotCanonical", "ReadRun", "Skim", "Tail", "decode_held", "decode_skims"]
__all__ += ["parse_read_batch", "read_varints", "skim"]

_RECORDS: Final = 0x0A
_TAIL: Final = 0x12
_SEQ_NUM: Final = 0x08
_TIMESTAMP: Final = 0x10
_HEADER: Final = 0x1A
_BODY: Final = 0x22
_NAME: Final = 0x0A
_VALUE: Final = 0x12
_TAIL_SEQ: Final = 0x08
_TAIL_TS: Final = 0x10


class Tail(NamedTuple):
    seq_num: int
    timestamp: int


class NotCanonical(Exception):
    """Not in the layout the bulk walk reads: the generated parser reads it instead."""


def parse_read_batch(message: bytes) -> tuple[RecordColumns, Tail | None]:
    skimmed = skim(message)
    if skimmed is not None:
        with contextlib.suppress(NotCanonical):
            return _decode_joined([skimmed]), skimmed.tail
    return _by_field(message)


class Skim(NamedTuple):
    """A ``ReadBatch``'s top level walked: where each record's fields start and end, and the tail."""

    message: bytes
    starts: list[int]
    ends: list[int]
    tail: Tail | None

    def last_seq_num(self) -> int | None:
        """The last record's seq_num as the parser reads it (None: no records, or not valid protobuf)."""
        if not self.starts:
            return None
        record = pb.SequencedRecord()
        try:
            record.ParseFromString(self.message[self.starts[-1] : self.ends[-1]])
        except DecodeError:
            return None
        return int(record.seq_num)


def skim(message: bytes) -> Skim | None:
    try:
        starts, ends, tail_span = _top_level(message)
        tail = None if tail_span is None else _tail(np.frombuffer(message, dtype=np.uint8), *tail_span)
    except NotCanonical:
        return None
    return Skim(message, starts, ends, tail)


def decode_skims(skims: Sequence[Skim]) -> RecordColumns:
    """The records of ``skims`` (at least one) decoded together: the numpy passes' fixed cost paid once."""
    try:
        return _decode_joined(skims)
    except NotCanonical:
        return concat_columns([parse_read_batch(sk.message)[0] for sk in skims])


def _top_level(data: bytes) -> tuple[list[int], list[int], tuple[int, int] | None]:
    starts: list[int] = []
    ends: list[int] = []
    pos, size = 0, len(data)
    try:
        while pos < size and data[pos] == _RECORDS:
            # The length varint: one byte under 128, two under 16 KiB (most records), read inline.
            b0 = data[pos + 1]
            if b0 < 0x80:
                at, length = pos + 2, b0
            elif (b1 := data[pos + 2]) < 0x80:
                at, length = pos + 3, (b0 & 0x7F) | (b1 << 7)
            else:
                at, length = _varint_at(data, pos + 1)
            starts.append(at)
            pos = at + length
            ends.append(pos)
    except IndexError:  # a truncated message: the parser says how
        raise NotCanonical from None
    if pos > size:
        raise NotCanonical
    tail: tuple[int, int] | None = None
    if pos < size:
        if data[pos] != _TAIL:
            raise NotCanonical
        at, length = _varint_at(data, pos + 1)
        tail = (at, at + length)
        if tail[1] != size:
            raise NotCanonical  # anything after the tail (records, a second tail): leave it to the parser
    return starts, ends, tail


def _varint_at(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    for at in range(pos, min(pos + 5, len(data))):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return at + 1, value
        shift += 7
    raise NotCanonical


def _at_key(d: Bytes, cur: Ints, end: Ints, key: int) -> Ints:
    live = np.flatnonzero(cur < end)
    hits: Ints = live[d[cur[live]] == key]
    return hits


def _length_field(d: Bytes, pos: Ints, end: Ints) -> tuple[Ints, Ints]:
    length, size = read_varints(d, pos + 1, end, 5)
    start = pos + 1 + size
    stop = start + length.astype(np.int64)
    if (stop > end).any():
        raise NotCanonical
    return start, length.astype(np.int64)


def _gather(buffer: pa.Buffer, starts: Ints, lengths: Ints) -> pa.Array:
    n = len(starts)
    if n == 0:
        return repeated(b"", 0, pa.binary())
    # Offsets start, end, start, end, ... over the whole message are ascending: an array whose even values
    # are the spans (and odd ones the bytes between them), without a copy; `take` then packs the spans.
    bounds = np.empty(2 * n, dtype=np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + lengths
    interleaved = pa.Array.from_buffers(pa.binary(), 2 * n - 1, [None, pa.py_buffer(bounds), buffer])
    return take(interleaved, np.arange(0, 2 * n, 2, dtype=np.int64))


def _optional_field(d: Bytes, cur: Ints, end: Ints, key: int) -> tuple[Ints, Ints]:
    """Each record's optional length-delimited ``key`` field at ``cur`` (``cur`` moves past it): (start,
    length), empty where absent."""
    start = cur.copy()
    length = np.zeros(len(cur), dtype=np.int64)
    has = _at_key(d, cur, end, key)
    if has.size:
        s, ln = _length_field(d, cur[has], end[has])
        start[has], length[has] = s, ln
        cur[has] = s + ln
    return start, length


def _headers(d: Bytes, buffer: pa.Buffer, cur: Ints, end: Ints) -> tuple[Ints, pa.Array, pa.Array]:
    found: list[tuple[Ints, ...]] = []  # per round: records, positions, name starts and lengths, values'
    while (at := _at_key(d, cur, end, _HEADER)).size:
        start, length = _length_field(d, cur[at], end[at])
        header_end = start + length
        # name (optional), then value (optional), and nothing else.
        h_cur = start.copy()
        name = _optional_field(d, h_cur, header_end, _NAME)
        value = _optional_field(d, h_cur, header_end, _VALUE)
        if not np.array_equal(h_cur, header_end):
            raise NotCanonical
        found.append((at, cur[at], *name, *value))
        cur[at] = header_end
    if not found:
        none = repeated(b"", 0, pa.binary())
        return np.zeros(len(cur), dtype=np.int64), none, none
    # Headers were found position by position; stream order is their order in the message.
    records, pos, name_start, name_len, value_start, value_len = (
        np.concatenate(c) for c in zip(*found, strict=True)
    )
    order = np.argsort(pos, kind="stable")
    names = _gather(buffer, name_start[order], name_len[order])
    values = _gather(buffer, value_start[order], value_len[order])
    return np.bincount(records[order], minlength=len(cur)).astype(np.int64), names, values


def _decode_joined(skims: Sequence[Skim]) -> RecordColumns:
    if len(skims) == 1:
        return _decode(skims[0].message, _positions(skims[0].starts), _positions(skims[0].ends))
    shifts = np.cumsum([0] + [len(sk.message) for sk in skims[:-1]])
    starts = np.concatenate([_positions(sk.starts) + shift for sk, shift in zip(skims, shifts, strict=True)])
    ends = np.concatenate([_positions(sk.ends) + shift for sk, shift in zip(skims, shifts, strict=True)])
    return _decode(b"".join(sk.message for sk in skims), starts, ends)


def _positions(at: list[int]) -> Ints:
    return np.array(at, dtype=np.int64)


def _decode(message: bytes, starts: Ints, end: Ints) -> RecordColumns:
    buffer = pa.py_buffer(message)
    d: Bytes = np.frombuffer(buffer, dtype=np.uint8)
    cur = starts.copy()  # each record's next field, moved on field by field

    seq_nums = _optional_varint(d, cur, end, _SEQ_NUM)
    timestamps = _optional_varint(d, cur, end, _TIMESTAMP)
    counts, names, values = _headers(d, buffer, cur, end)
    body_start, body_len = _optional_field(d, cur, end, _BODY)
    if not np.array_equal(cur, end):
        raise NotCanonical  # a field out of order, repeated, or unknown

    return RecordColumns(seq_nums, timestamps, _gather(buffer, body_start, body_len), counts, names, values)


def _tail(d: Bytes, start: int, stop: int) -> Tail:
    cur = np.array([start], dtype=np.int64)
    end = np.array([stop], dtype=np.int64)
    seq_num, timestamp = (_optional_varint(d, cur, end, key) for key in (_TAIL_SEQ, _TAIL_TS))
    if cur[0] != stop:
        raise NotCanonical
    return Tail(int(seq_num[0]), int(timestamp[0]))


def _optional_varint(d: Bytes, cur: Ints, end: Ints, key: int) -> Values:
    """Each record's optional varint ``key`` field at ``cur`` (``cur`` moves past it), 0 where absent."""
    out = np.zeros(len(cur), dtype=np.uint64)
    at = _at_key(d, cur, end, key)
    if at.size:
        value, size = read_varints(d, cur[at] + 1, end[at], 10)
        out[at] = value
        cur[at] += 1 + size
    return out


def _by_field(message: bytes) -> tuple[RecordColumns, Tail | None]:
    batch = pb.ReadBatch()
    batch.ParseFromString(message)
    records = batch.records
    headers = [h for r in records for h in r.headers]
    columns = RecordColumns(
        np.array([r.seq_num for r in records], dtype=np.uint64),
        np.array([r.timestamp for r in records], dtype=np.uint64),
        pa.array([r.body for r in records], type=pa.binary()),
        np.array([len(r.headers) for r in records], dtype=np.int64),
        pa.array([h.name for h in headers], type=pa.binary()),
        pa.array([h.value for h in headers], type=pa.binary()),
    )
    tail = Tail(batch.tail.seq_num, batch.tail.timestamp) if batch.HasField("tail") else None
    return columns, tail


class Arrival(NamedTuple):
    """What a message brought: its record count, the last one's seq_num (None without records), its tail."""

    records: int
    last_seq_num: int | None
    tail: Tail | None


class Held(NamedTuple):
    """A run taken and not decoded yet: its parts (walked messages, or records parsed on arrival) in order."""

    parts: tuple[Skim | RecordColumns, ...]
    records: int  # at least one
    last_seq_num: int

    @classmethod
    def of(cls, columns: RecordColumns) -> Held:
        return cls((columns,), len(columns), int(columns.seq_nums[-1]))


def decode_held(runs: Sequence[Held]) -> list[RecordColumns]:
    """Each run's records, decoded together: consecutive walked messages, of one run or several, in one go."""
    decoded: list[RecordColumns] = []
    skims: list[Skim] = []
    for part in (part for run in runs for part in run.parts):
        if isinstance(part, Skim):
            skims.append(part)
            continue
        if skims:
            decoded.append(decode_skims(skims))
            skims = []
        decoded.append(part)
    if skims:
        decoded.append(decode_skims(skims))
    joined = concat_columns(decoded)
    if len(runs) == 1:
        return [joined]
    return _cut(joined, [run.records for run in runs])


def _cut(columns: RecordColumns, sizes: Sequence[int]) -> list[RecordColumns]:
    offsets = columns.header_offsets.tolist()
    out: list[RecordColumns] = []
    lo = 0
    for n in sizes:
        hi = lo + n
        first, headers = offsets[lo], offsets[hi] - offsets[lo]
        out.append(
            RecordColumns(
                columns.seq_nums[lo:hi],
                columns.timestamps[lo:hi],
                columns.bodies.slice(lo, n),
                columns.header_counts[lo:hi],
                columns.names.slice(first, headers),
                columns.values.slice(first, headers),
            )
        )
        lo = hi
    return out


class ReadRun:
    """The records of the messages added since the last `take`, in order."""

    def __init__(self) -> None:
        self._parts: list[Skim | RecordColumns] = []
        self.records = 0
        self.size = 0  # bytes of the messages held
        self._last_seq_num = -1

    def add(self, message: bytes) -> Arrival:
        skimmed = skim(message)
        last = None if skimmed is None else skimmed.last_seq_num()
        if skimmed is None or (skimmed.starts and last is None):  # not canonical: the parser says how
            columns, tail = parse_read_batch(message)
            if len(columns):
                last = int(columns.seq_nums[-1])
                self._hold(columns, len(columns), len(message), last)
            return Arrival(len(columns), last, tail)
        if skimmed.starts:
            assert last is not None
            self._hold(skimmed, len(skimmed.starts), len(message), last)
        return Arrival(len(skimmed.starts), last, skimmed.tail)

    def take(self) -> Held:
        """Every record held (at least one), not decoded yet; the run is then empty."""
        held = Held(tuple(self._parts), self.records, self._last_seq_num)
        self._parts, self.records, self.size = [], 0, 0
        return held

    def _hold(self, part: Skim | RecordColumns, records: int, size: int, last_seq_num: int) -> None:
        self._parts.append(part)
        self._last_seq_num = last_seq_num
        self.records += records
        self.size += size


Values = npt.NDArray[np.uint64]

_WORD: Final = 8
_HIGH_BITS: Final = np.uint64(0x8080808080808080)
_LOW_SEVENS: Final = np.uint64(0x7F7F7F7F7F7F7F7F)
# Squeezing eight 7-bit groups, one byte apart, into 56 contiguous bits: pairs, then quads, then halves.
_SQUEEZE: Final = (
    (np.uint64(0x007F007F007F007F), np.uint64(0x7F007F007F007F00), np.uint64(1)),
    (np.uint64(0x00003FFF00003FFF), np.uint64(0x3FFF00003FFF0000), np.uint64(2)),
    (np.uint64(0x000000000FFFFFFF), np.uint64(0x0FFFFFFF00000000), np.uint64(4)),
)
_ONE: Final = np.uint64(1)
_BYTE_BITS: Final = np.uint64(8)
_SHIFTS: Final = np.arange(10, dtype=np.uint64) * np.uint64(7)


def read_varints(d: Bytes, pos: Ints, end: Ints, limit: int) -> tuple[Values, Ints]:
    """Values and sizes of the varints at ``pos``; each must end before its ``end`` within ``limit`` bytes."""
    if not len(pos):
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    if len(d) >= _WORD:
        found = _in_words(d, pos)
        if found is not None:
            value, size = found
            if (size > limit).any() or (pos + size > end).any():
                raise NotCanonical
            return value, size
    return _in_blocks(d, pos, end, limit)


def _words_at(d: Bytes, pos: Ints) -> Values:
    n = len(d)
    words = np.ndarray(shape=(n - _WORD + 1,), dtype="<u8", buffer=d, strides=(1,))
    # The last words start at most eight bytes before the end: shift the bytes of later positions down.
    clamped = np.minimum(pos, n - _WORD)
    out: Values = words[clamped]
    behind = pos - clamped
    if behind.any():
        out >>= behind.astype(np.uint64) * _BYTE_BITS
    return out


def _in_words(d: Bytes, pos: Ints) -> tuple[Values, Ints] | None:
    word = _words_at(d, pos)
    ends = ~word & _HIGH_BITS  # the high bit of every byte that ends a varint
    if not ends.all():
        return None
    first_end = ends & (~ends + _ONE)  # the lowest of them
    value = word & ((first_end << _ONE) - _ONE) & _LOW_SEVENS
    for low, high, shift in _SQUEEZE:
        value = (value & low) | ((value & high) >> shift)
    # first_end is 2**(8 * size - 1): its float exponent is 8 * size.
    _, exponent = np.frexp(first_end.astype(np.float64))
    size: Ints = (exponent >> 3).astype(np.int64)
    return value, size


def _in_blocks(d: Bytes, pos: Ints, end: Ints, limit: int) -> tuple[Values, Ints]:
    span = np.arange(limit)
    block = d[np.minimum(pos[:, None] + span, len(d) - 1)]
    last = block < 0x80
    if not last.any(axis=1).all():
        raise NotCanonical
    size = last.argmax(axis=1) + 1
    if (pos + size > end).any():
        raise NotCanonical  # runs past its end (the block reads on into what follows)
    digits = np.where(span < size[:, None], block & 0x7F, 0).astype(np.uint64)
    value: Values = (digits << _SHIFTS[:limit]).sum(axis=1, dtype=np.uint64)
    return value, size.astype(np.int64)
