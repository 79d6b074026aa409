"""The append hot path for records with headers or timestamps: every record of an ``AppendInput`` read
in numpy passes over the whole message (one pass per field position, not a Python step per record).

A record in the canonical layout every protobuf serializer writes (fields in number order, empty ``bytes``
omitted) is ``08 <ts>``? ``(12 <len> 0a <len> <name> [12 <len> <value>])*`` ``(1a <len> <body>)``?. Its
part of a ``SequencedRecord`` (headers = 3, body = 4) is the same bytes after the timestamp with the
top-level keys renumbered (``12`` -> ``1a``, ``1a`` -> ``22``): no field is decoded into Python objects.

The scan answers ``None`` for anything else -- a header with an empty name (a command record), fields out
of order or repeated, unknown fields, over-long varints -- and the caller decodes that message record by
record. The message must already have parsed as an ``AppendInput`` (so its structure is well formed).
"""

from __future__ import annotations

from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["RecordScan", "scan_records"]

Ints = npt.NDArray[np.int64]

_RECORD: Final = 0x0A
_TIMESTAMP: Final = 0x08
_HEADER: Final = 0x12
_BODY: Final = 0x1A
_NAME: Final = 0x0A
_VALUE: Final = 0x12
_SEQ_HEADER: Final = 0x1A
_SEQ_BODY: Final = 0x22
_RECORD_OVERHEAD: Final = 8
_HEADER_OVERHEAD: Final = 2


class RecordScan(NamedTuple):
    """What the append path needs of every record."""

    tails: list[bytes]
    """The headers-and-body part of each record's ``SequencedRecord`` encoding."""
    metered: Ints
    """Each record's metered size."""
    complex: npt.NDArray[np.bool_]
    """Records with headers or a timestamp (not body-only)."""
    client_ts: dict[int, int]
    """Record index -> client timestamp, for records that carry one."""


class _NotCanonical(Exception):
    """The message is not in the layout this scan reads."""


def scan_records(data: bytes, lengths: Ints, trailer: int) -> RecordScan | None:
    """Scan the records of an encoded ``AppendInput`` whose records field holds values of `lengths`
    bytes and whose other fields (match_seq_num, fencing_token) take `trailer` bytes at the end."""
    try:
        return _scan(np.frombuffer(data, dtype=np.uint8), lengths, trailer, data)
    except _NotCanonical:
        return None


def _scan(d: npt.NDArray[np.uint8], lengths: Ints, trailer: int, data: bytes) -> RecordScan:
    n = len(lengths)
    # Top level: records back to back from byte 0, each `0a <len> <record>`, then the trailer.
    size = _varint_sizes(lengths)
    starts = np.zeros(n, dtype=np.int64)
    np.cumsum((1 + size + lengths)[:-1], out=starts[1:])
    if n and int(starts[-1] + 1 + size[-1] + lengths[-1]) + trailer != len(d):
        raise _NotCanonical
    _expect(d, starts, _RECORD)
    value, vsize = _varints(d, starts + 1, 5)
    if not (np.array_equal(value, lengths) and np.array_equal(vsize, size)):
        raise _NotCanonical
    cur = starts + 1 + size
    end = cur + lengths
    metered = np.full(n, _RECORD_OVERHEAD, dtype=np.int64)
    complex_ = np.zeros(n, dtype=np.bool_)
    renumber: list[tuple[Ints, int]] = []

    client_ts: dict[int, int] = {}
    at = _at_key(d, cur, end, _TIMESTAMP)
    if at.size:
        stamps, ssize = _varints(d, cur[at] + 1, 10)
        cur[at] += 1 + ssize
        complex_[at] = True
        client_ts = dict(zip(at.tolist(), stamps.tolist(), strict=True))
    tail_start = cur.copy()

    while (at := _at_key(d, cur, end, _HEADER)).size:
        pos = cur[at]
        hlen, hsize = _varints(d, pos + 1, 5)
        name_at = pos + 1 + hsize
        header_end = name_at + hlen.astype(np.int64)
        if (header_end > end[at]).any() or (hlen < 2).any():
            raise _NotCanonical
        _expect(d, name_at, _NAME)
        nlen, nsize = _varints(d, name_at + 1, 5)
        name_end = name_at + 1 + nsize + nlen.astype(np.int64)
        if (nlen == 0).any() or (name_end > header_end).any():
            raise _NotCanonical  # an empty name (a command record) or a name past its header
        vlen = np.zeros(len(at), dtype=np.int64)
        has_value = name_end < header_end
        if has_value.any():
            value_at = name_end[has_value]
            _expect(d, value_at, _VALUE)
            length, lsize = _varints(d, value_at + 1, 5)
            if (length == 0).any() or not np.array_equal(
                value_at + 1 + lsize + length.astype(np.int64), header_end[has_value]
            ):
                raise _NotCanonical  # an empty value written out, or a value past its header
            vlen[has_value] = length.astype(np.int64)
        metered[at] += _HEADER_OVERHEAD + nlen.astype(np.int64) + vlen
        complex_[at] = True
        renumber.append((pos, _SEQ_HEADER))
        cur[at] = header_end

    at = _at_key(d, cur, end, _BODY)
    if at.size:
        pos = cur[at]
        blen, bsize = _varints(d, pos + 1, 5)
        metered[at] += blen.astype(np.int64)
        renumber.append((pos, _SEQ_BODY))
        cur[at] = pos + 1 + bsize + blen.astype(np.int64)
    if not np.array_equal(cur, end):
        raise _NotCanonical  # a field out of order, repeated, or unknown

    out = d.copy()
    for pos, key in renumber:
        out[pos] = key
    encoded = out.tobytes() if renumber else data
    tails = [encoded[a:b] for a, b in zip(tail_start.tolist(), end.tolist(), strict=True)]
    return RecordScan(tails, metered, complex_, client_ts)


def _at_key(d: npt.NDArray[np.uint8], cur: Ints, end: Ints, key: int) -> Ints:
    """Indices of the records whose next field (before their end) has `key`."""
    live = cur < end
    hit = np.zeros(len(cur), dtype=np.bool_)
    hit[live] = d[cur[live]] == key
    return np.flatnonzero(hit)


def _expect(d: npt.NDArray[np.uint8], pos: Ints, key: int) -> None:
    if pos.size and ((pos >= len(d)).any() or (d[np.minimum(pos, len(d) - 1)] != key).any()):
        raise _NotCanonical


def _varints(d: npt.NDArray[np.uint8], pos: Ints, limit: int) -> tuple[npt.NDArray[np.uint64], Ints]:
    """The varints at `pos`: values and sizes (at most `limit` bytes each, else not canonical)."""
    value = np.zeros(len(pos), dtype=np.uint64)
    size = np.zeros(len(pos), dtype=np.int64)
    live = np.ones(len(pos), dtype=np.bool_)
    last = len(d) - 1
    for k in range(limit):
        at = pos + k
        if (at[live] > last).any():
            raise _NotCanonical
        byte = d[np.minimum(at, last)].astype(np.uint64)
        value[live] |= (byte[live] & np.uint64(0x7F)) << np.uint64(7 * k)
        size[live] = k + 1
        live &= byte >= 0x80
        if not live.any():
            return value, size
    raise _NotCanonical


def _varint_sizes(values: Ints) -> Ints:
    sizes = np.ones(len(values), dtype=np.int64)
    for k in range(1, 10):
        more = values >= (1 << (7 * k))
        if not more.any():
            break
        sizes += more
    return sizes
