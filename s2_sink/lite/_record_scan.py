"""The append hot path for records with headers or timestamps: every record of an ``AppendInput`` read
in numpy passes over the whole message (one pass per field position, not a Python step per record).

A record in the canonical layout every protobuf serializer writes (fields in number order, empty ``bytes``
omitted, varints in their shortest form) is ``08 <ts>``? ``(12 <len> 0a <len> <name> [12 <len> <value>])*``
``(1a <len> <body>)``?. Its part of a ``SequencedRecord`` (headers = 3, body = 4) is the same bytes after the
timestamp with the top-level keys renumbered (``12`` -> ``1a``, ``1a`` -> ``22``): no field is decoded into
Python objects. Renumbered in place, the input's records field (``0a <len> <record>`` each) then reads as a
``RawList`` of those parts whenever no record carries a timestamp, so a batch can be stored as that one
buffer and cut into records (in C) only when it is first read.

Batches whose records all share one leading layout (an upsert batch: the same headers, names of the same
lengths, then a body) are read by a shortcut with a fixed number of passes (`_uniform_scan`); the passes
below read every other.

The scan answers ``None`` for anything else -- a header with an empty name (a command record), fields out
of order or repeated, unknown fields, over-long varints, an empty body or value written out -- and the
caller decodes that message record by record. Its top-level fields must already have parsed (as a
``RawList``); what is inside its records is checked here.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt

from s2_sink.lite._field_keys import BODY, HEADER, NAME, RECORD, SEQ_BODY, SEQ_HEADER, TIMESTAMP, VALUE
from s2_sink.lite._uniform_scan import scan_uniform

__all__ = ["RecordScan", "scan_records"]

Ints = npt.NDArray[np.int64]

_RECORD_OVERHEAD: Final = 8
_HEADER_OVERHEAD: Final = 2
#: Zero bytes after the message, so that a read near its end needs no bounds check: a varint read starts at
#: most 11 bytes past the end (a key before it, a timestamp varint of up to 10 bytes) and spans 10 bytes; a
#: header's value key is looked for up to 4 + 255 bytes past the header's start.
_PAD: Final = 272
_EVERY: Final = slice(None)
#: The smallest value of each varint size above one byte.
_VARINT_LIMITS: Final = np.array([1 << (7 * k) for k in range(1, 9)], dtype=np.int64)


class RecordScan(NamedTuple):
    """What the append path needs of every record."""

    encoded: bytes
    """The records field of the input (its trailer cut), header and body keys renumbered: where no record
    carries a timestamp, it reads as a ``RawList`` of the stored parts (see the module doc)."""
    tail_start: Ints
    """Where each record's stored part starts in ``encoded`` (after its timestamp, if any)."""
    end: Ints
    """Where each record ends in ``encoded``."""
    metered: Ints
    """Each record's metered size."""
    complex: npt.NDArray[np.bool_]
    """Records with headers or a timestamp (not body-only)."""
    client_ts: dict[int, int]
    """Record index -> client timestamp, for records that carry one."""

    def tails(self) -> list[bytes]:
        """The headers-and-body part of each record's ``SequencedRecord`` encoding."""
        enc = self.encoded
        return [enc[a:b] for a, b in zip(self.tail_start.tolist(), self.end.tolist(), strict=True)]


class _NotCanonical(Exception):
    """The message is not in the layout this scan reads."""


def scan_records(data: bytes, lengths: Ints, trailer: int | None) -> RecordScan | None:
    """Scan the records of an encoded ``AppendInput`` whose records field holds values of `lengths`
    bytes and whose other fields (match_seq_num, fencing_token) take `trailer` bytes at the end (None:
    whatever follows the records, which the caller checks)."""
    try:
        return _scan(data, lengths, trailer)
    except _NotCanonical:
        return None


def _scan(data: bytes, lengths: Ints, trailer: int | None) -> RecordScan:
    n = len(lengths)
    total = len(data)
    # A padded copy: read from, then renumbered in place.
    d = np.empty(total + _PAD, dtype=np.uint8)
    d[:total] = np.frombuffer(data, dtype=np.uint8)
    d[total:] = 0
    # Top level: records back to back from byte 0, each `0a <len> <record>`, then the trailer. The lengths
    # need not be read again: the parse that measured them found the first record at 0 and each next field
    # where the one before ended, so a record key at each place computed from them (with the shortest length
    # encoding) is that record. An over-long length would put ``cur`` inside it, at a byte that is no field
    # key (0x80 or more, or its last byte 0): unless the record is empty, its fields would not add up, and
    # then the next place computed (or the trailer) would start inside it.
    size = np.searchsorted(_VARINT_LIMITS, lengths, side="right") + 1
    end = np.cumsum(1 + size + lengths)
    cur = end - lengths
    content = cur.copy()
    cut = int(end[-1]) if n else 0
    if not n or cut > total or (trailer is not None and cut + trailer != total):
        raise _NotCanonical
    if (d[cur - 1 - size] != RECORD).any():
        raise _NotCanonical
    uniform = scan_uniform(data, d, content, end)
    if uniform is not None:
        d[uniform.headers] = SEQ_HEADER
        d[uniform.bodies] = SEQ_BODY
        every = np.ones(n, dtype=np.bool_)
        return RecordScan(d[:cut].tobytes(), content, end, uniform.metered, every, {})
    metered = np.full(n, _RECORD_OVERHEAD, dtype=np.int64)
    renumber: list[tuple[Ints, int]] = []

    client_ts: dict[int, int] = {}
    at = _at_key(d, cur, end, TIMESTAMP)
    if at is not None:
        stamps, ssize = _varints(d, cur[at] + 1, 10, np.uint64)
        cur[at] += 1 + ssize
        client_ts = dict(zip(np.arange(n)[at].tolist(), stamps.tolist(), strict=True))
    tail_start = cur.copy()

    # Headers of one-byte length (as an upsert's ``@key`` and ``@action``) are only stepped over here, and
    # read all at once after (`_small_headers`); others are read as they come.
    small: list[tuple[Ints | slice, Ints]] = []
    while (at := _at_key(d, cur, end, HEADER)) is not None:
        # Every record has this header (as in an upsert batch): whole arrays, no selection (and a copy:
        # ``cur[at]`` of a slice is a view that moves on).
        pos = cur.copy() if isinstance(at, slice) else cur[at]
        renumber.append((pos, SEQ_HEADER))
        length = d[pos + 1]
        header_end = pos + 2 + length
        if ((length < 0x80) & (header_end <= end[at])).all():
            small.append((at, pos))
            cur[at] = header_end
            continue
        hlen, hsize = _varints(d, pos + 1, 5)
        name_at = pos + 1 + hsize
        header_end = name_at + hlen
        if (header_end > end[at]).any() or (hlen < 2).any() or (d[name_at] != NAME).any():
            raise _NotCanonical
        nlen, nsize = _varints(d, name_at + 1, 5)
        name_end = name_at + 1 + nsize + nlen
        if (nlen == 0).any() or (name_end > header_end).any():
            raise _NotCanonical  # an empty name (a command record) or a name past its header
        has_value = name_end < header_end
        if has_value.all():
            vlen = _value_lengths(d, name_end, header_end)
        else:
            vlen = np.zeros(len(pos), dtype=np.int64)
            if has_value.any():
                vlen[has_value] = _value_lengths(d, name_end[has_value], header_end[has_value])
        metered[at] += _HEADER_OVERHEAD + nlen + vlen
        cur[at] = header_end
    if small:
        header_metered = _small_headers(d, np.concatenate([pos for _, pos in small]))
        done = 0
        for at, pos in small:
            metered[at] += header_metered[done : done + len(pos)]
            done += len(pos)
    complex_ = cur != content

    at = _at_key(d, cur, end, BODY)
    if at is not None:
        pos = cur.copy() if isinstance(at, slice) else cur[at]
        blen, bsize = _varints(d, pos + 1, 5)
        if (blen == 0).any():
            raise _NotCanonical  # an empty body written out: a serializer omits it, so must the stored part
        metered[at] += blen
        renumber.append((pos, SEQ_BODY))
        cur[at] = pos + 1 + bsize + blen
    if not np.array_equal(cur, end):
        raise _NotCanonical  # a field out of order, repeated, or unknown

    for pos, key in renumber:
        d[pos] = key
    encoded = d[:cut].tobytes() if renumber else data[:cut]
    return RecordScan(encoded, tail_start, end, metered, complex_, client_ts)


def _small_headers(d: npt.NDArray[np.uint8], pos: Ints) -> Ints:
    """The metered sizes of the headers at `pos`, whose lengths are one byte (below 0x80, as the header is
    known to end in its record): each must be ``12 <len> 0a <len> <name>``, maybe with ``12 <len> <value>``
    (their lengths are then one byte too), else the input is not canonical."""
    hlen = d[pos + 1].astype(np.int64)
    nlen = d[pos + 3].astype(np.int64)
    value_at = pos + 4 + nlen  # where a value's key would be (in the padding at worst)
    vlen = d[value_at + 1].astype(np.int64)
    has_value = hlen > 2 + nlen
    ok = (
        (d[pos + 2] == NAME)
        & (nlen > 0)
        & np.where(
            has_value,
            (d[value_at] == VALUE) & (vlen > 0) & (hlen == 4 + nlen + vlen),
            hlen == 2 + nlen,
        )
    )
    if not ok.all():
        raise _NotCanonical  # an empty name (a command record), a value written out empty, or another layout
    # 2 + name + value: the header's length less the keys and lengths of its name and value.
    return hlen - 2 * has_value


def _value_lengths(d: npt.NDArray[np.uint8], value_at: Ints, header_end: Ints) -> Ints:
    """Lengths of the header values at `value_at`, each of which must end its header at `header_end`."""
    if (d[value_at] != VALUE).any():
        raise _NotCanonical
    length, lsize = _varints(d, value_at + 1, 5)
    if (length == 0).any() or not np.array_equal(value_at + 1 + lsize + length, header_end):
        raise _NotCanonical  # an empty value written out, or a value past its header
    return length


def _at_key(d: npt.NDArray[np.uint8], cur: Ints, end: Ints, key: int) -> Ints | slice | None:
    """The records whose next field (before their end) has `key`: their indices, every record (a whole
    slice), or None."""
    hit = (d[cur] == key) & (cur < end)
    if hit.all():
        return _EVERY
    at = np.flatnonzero(hit)
    return at if at.size else None


def _varints(
    d: npt.NDArray[np.uint8], pos: Ints, limit: int, dtype: type[np.integer] = np.int64
) -> tuple[npt.NDArray[np.int64], Ints]:
    """The varints at `pos`: values and sizes (shortest form, at most `limit` bytes, else not canonical).

    Whole-array passes, one per byte of the longest varint (lengths of small fields take one)."""
    byte = d[pos]
    value = (byte & 0x7F).astype(dtype)
    size = np.ones(len(pos), dtype=np.int64)
    more = byte >= 0x80
    k = 1
    while more.any():
        if k == limit:
            raise _NotCanonical
        byte = d[pos + k]
        if (more & (byte == 0)).any():
            raise _NotCanonical  # an over-long varint: a last byte of zero
        value |= np.where(more, (byte & 0x7F).astype(dtype) << dtype(7 * k), dtype(0))
        size += more
        more &= byte >= 0x80
        k += 1
    return value, size
