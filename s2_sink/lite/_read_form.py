"""A batch's records as they are read: the records field of a ``ReadBatch``, built once in bulk.

Every record of a batch becomes ``0a <len> 08 <seq_num> 10 <timestamp> [22] <stored part>``: fields that
depend on the record's position and size, then the bytes it was stored with (a body-only ``AppendRecord``
after its ``1a`` key, which the ``22`` renumbers, or a headers-and-body part as stored). Arrow joins them:
each record is four ``binary_view`` values, ``0a <len>``, ``08 <seq_num>``, ``10 <timestamp> [22]`` (each at
most 12 bytes, so held in the view itself, written by numpy over all records at once, one column per varint
byte) and the stored part (a buffer, an offset and a length), and casting that array to ``large_binary``
copies them all, one after the other, into one buffer (C++, no Python object per record). A read of records
``[i, j)`` of the batch is then one slice of that buffer, between ``offsets[i]`` and ``offsets[j]``.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink.lite._wire import varint

__all__ = ["Pieces", "ReadForm", "Stamps", "build_read_form"]

Ints = npt.NDArray[np.int64]
Stamps = npt.NDArray[np.uint64]

#: A ``binary_view`` value of at most this many bytes is held in the view itself (Arrow's columnar format).
_INLINE: Final = 12
#: Views per record: ``0a <len>``, ``08 <seq_num>``, ``10 <timestamp> [22]``, the stored part.
_PER_RECORD: Final = 4
_FOUR: Final = np.arange(4, dtype=np.int64)
_TWELVE: Final = np.arange(_INLINE, dtype=np.int64)
#: Batches of fewer records are built record by record.
_BULK_FROM: Final = 32
#: The smallest value of each varint size above one byte.
_VARINT_LIMITS: Final = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_SHIFTS: Final = np.arange(0, 70, 7, dtype=np.uint64)
_COLUMNS: Final = np.arange(10, dtype=np.int64)


class Pieces(NamedTuple):
    """Where each record's stored part lies: ``buffer[start:start + length]`` (buffer 0 or 1 of the two given
    to `build_read_form`), and whether a ``22`` key goes before it (a body-only record stored as its
    ``AppendRecord`` encoding, cut after its ``1a`` key)."""

    buffer: Ints
    start: Ints
    length: Ints
    body_key: npt.NDArray[np.bool_]


class ReadForm(NamedTuple):
    """The records field of a ``ReadBatch`` holding every record of a batch, and where each record starts in
    it (``offsets[n]`` is its length)."""

    data: memoryview
    offsets: Ints

    def span(self, i: int, j: int) -> memoryview:
        """The records field of a ``ReadBatch`` of records ``[i, j)`` of the batch."""
        return self.data[int(self.offsets[i]) : int(self.offsets[j])]


def _varint_sizes(values: npt.NDArray[np.uint64]) -> Ints:
    """Bytes in the shortest varint of each value."""
    return np.searchsorted(_VARINT_LIMITS, values, side="right").astype(np.int64) + 1


def _inline_field(raw: npt.NDArray[np.uint8], key: int, values: npt.NDArray[np.uint64], sizes: Ints) -> Ints:
    """Write ``<key> <varint>`` of each value as the inline bytes of the views `raw` (one row each, 16
    bytes); returns their lengths. Bytes past a varint's end come out zero, as inline views need."""
    width = int(sizes.max())
    groups = (values[:, None] >> _SHIFTS[:width]) & np.uint64(0x7F)
    groups |= (_COLUMNS[:width] < (sizes[:, None] - 1)).astype(np.uint64) << np.uint64(7)
    raw[:, 4] = key
    raw[:, 5 : 5 + width] = groups
    return 1 + sizes


def build_read_form(
    first_seq: int, timestamps: int | Stamps, pieces: Pieces, buffers: tuple[bytes, bytes]
) -> ReadForm:
    """The read form of a batch whose records start at seq_num `first_seq`, stamped `timestamps` (one for
    all or one each), with stored parts `pieces` in `buffers`."""
    n = len(pieces.length)
    if n < _BULK_FROM:
        return _record_by_record(first_seq, timestamps, pieces, buffers)
    m = _PER_RECORD * n
    views = np.zeros((m, 4), dtype=np.int32)
    raw = views.view(np.uint8).reshape(m, 16)
    seqs = np.arange(first_seq, first_seq + n, dtype=np.uint64)
    seq_size = _varint_sizes(seqs)
    key = pieces.body_key
    stamp = raw[2::4]
    if isinstance(timestamps, int):
        # One timestamp for the whole batch: its field is the same bytes in every record.
        field = b"\x10" + varint(timestamps)
        stamp[:, 4 : 4 + len(field)] = np.frombuffer(field, dtype=np.uint8)
        views[2::4, 0] = len(field) + key
        stamp[key, 4 + len(field)] = 0x22
        ts_size: Ints | int = len(field) - 1
    else:
        ts = timestamps.astype(np.uint64)
        ts_size = _varint_sizes(ts)
        views[2::4, 0] = _inline_field(stamp, 0x10, ts, ts_size) + key
        stamp[np.flatnonzero(key), 5 + ts_size[key]] = 0x22
    content = (2 + seq_size + ts_size + key + pieces.length).astype(np.uint64)
    views[0::4, 0] = _inline_field(raw[0::4], 0x0A, content, _varint_sizes(content))
    views[1::4, 0] = _inline_field(raw[1::4], 0x08, seqs, seq_size)
    _part_views(views[3::4], raw[3::4], pieces, buffers)
    data_buffers = [pa.py_buffer(b) for b in buffers]
    joined = pa.Array.from_buffers(pa.binary_view(), m, [None, pa.py_buffer(views), *data_buffers])
    out = pc.cast(joined, pa.large_binary())
    offsets = np.frombuffer(out.buffers()[1], dtype=np.int64)[::_PER_RECORD].copy()
    data = out.buffers()[2]
    return ReadForm(memoryview(data) if data is not None else memoryview(b""), offsets)


def _record_by_record(
    first_seq: int, timestamps: int | Stamps, pieces: Pieces, buffers: tuple[bytes, bytes]
) -> ReadForm:
    """`build_read_form` for a small batch, where a Python step per record costs less than numpy's calls."""
    stamps = [timestamps] * len(pieces.length) if isinstance(timestamps, int) else timestamps.tolist()
    items: list[bytes] = []
    offsets = [0]
    for x, (b, start, length, key) in enumerate(
        zip(
            pieces.buffer.tolist(),
            pieces.start.tolist(),
            pieces.length.tolist(),
            pieces.body_key.tolist(),
            strict=True,
        )
    ):
        content = b"".join(
            (
                b"\x08",
                varint(first_seq + x),
                b"\x10",
                varint(stamps[x]),
                b"\x22" if key else b"",
                buffers[b][start : start + length],
            )
        )
        items.append(b"\x0a" + varint(len(content)) + content)
        offsets.append(offsets[-1] + len(items[-1]))
    return ReadForm(memoryview(b"".join(items)), np.array(offsets, dtype=np.int64))


def _part_views(
    views: npt.NDArray[np.int32], raw: npt.NDArray[np.uint8], pieces: Pieces, buffers: tuple[bytes, bytes]
) -> None:
    """The stored parts' views: a 4-byte length, then either the bytes themselves (up to 12, zero padded) or
    their first four bytes, the buffer's index and the offset (little-endian)."""
    length = pieces.length
    views[:, 0] = length
    short = length <= _INLINE
    for b, stored in enumerate(buffers):
        if not stored:
            continue  # only empty parts can point here, and their views are all zeros
        src = np.frombuffer(stored, dtype=np.uint8)
        mine = pieces.buffer == b
        long_ = mine & ~short
        every = bool(long_.all())
        at: Ints | slice = slice(None) if every else np.flatnonzero(long_)
        start = pieces.start[at]
        if len(start):
            # A value of more than 12 bytes: its first four are within the buffer.
            raw[at, 4:8] = src[start[:, None] + _FOUR]
            views[at, 2] = b
            views[at, 3] = start
        if every:
            continue
        inline = np.flatnonzero(mine & short & (length > 0))
        if len(inline):
            held = src[np.minimum(pieces.start[inline, None] + _TWELVE, len(src) - 1)]
            held[length[inline, None] <= _TWELVE] = 0
            raw[inline, 4:] = held
