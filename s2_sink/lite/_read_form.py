"""A batch's records as they are read: the records field of a ``ReadBatch``, built once in bulk.

Every record of a batch becomes ``0a <len> 08 <seq_num> 10 <timestamp> [22] <stored part>``: fields that
depend on the record's position and size, then the bytes it was stored with (a body-only ``AppendRecord``
after its ``1a`` key, which the ``22`` renumbers, or a headers-and-body part as stored). Arrow joins them:
each record is three ``binary_view`` values, ``0a <len> 08 <seq_num>`` and ``10 <timestamp> [22]`` (each at
most 12 bytes, so held in the view itself) and the stored part (a buffer, an offset and a length), and
casting that array to ``large_binary`` copies them all, one after the other, into one buffer (C++, no Python
object per record). A read of records ``[i, j)`` of the batch is then one slice of that buffer, between
``offsets[i]`` and ``offsets[j]``.

The build costs a few dozen whole-array numpy calls per batch, whatever its size, so it counts calls: a
varint is written as a little-endian integer (its 7-bit groups spread one to a byte, with the continuation
bits of its size), a size shared by every record of the batch (the usual case) is one number rather than an
array, and consecutive seq_nums are spread by one addition. Seq_nums and timestamps of more than 7 bytes
(from 2**49, beyond any real stream or clock in milliseconds) do not fit that way: such a batch is built
record by record, as are batches too small for numpy's calls to pay.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink.lite._wire import varint

__all__ = ["Pieces", "ReadForm", "Sizes", "Stamps", "build_read_form", "varint_size"]

Ints = npt.NDArray[np.int64]
Stamps = npt.NDArray[np.uint64]
Words = npt.NDArray[np.uint64]
#: Sizes of a batch's records' varints: one number when every record's is the same size, else one each.
Sizes = int | Ints

#: A ``binary_view`` value of at most this many bytes is held in the view itself (Arrow's columnar format).
_INLINE: Final = 12
#: Views per record: ``0a <len> 08 <seq_num>``, ``10 <timestamp> [22]``, the stored part.
_PER_RECORD: Final = 3
#: Batches of fewer records are built record by record.
_BULK_FROM: Final = 32
#: The bulk build joins its parts through Arrow's ``binary_view`` type, new in pyarrow 16; the package allows
#: pyarrow 14 (Databricks Runtime 15.4 LTS ships 14.0.1), where every batch is built record by record.
HAS_BINARY_VIEW: Final = hasattr(pa, "binary_view")
#: Seq_nums and timestamps below this take at most 7 varint bytes, as the bulk build needs.
_BULK_BELOW: Final = 1 << 49
#: A record's length takes at most 3 varint bytes (below 2 MiB: records are at most 1 MiB).
_LENGTH_BELOW: Final = 1 << 21
#: The smallest value of each varint size above one byte.
_VARINT_LIMITS: Final = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
#: The continuation bits of a varint of k bytes (bit 7 of each byte but its last), for k = 0..8.
_CONTINUATION: Final = np.array(
    [sum(0x80 << (8 * b) for b in range(k - 1)) for k in range(9)], dtype=np.uint64
)
_LOW7: Final = np.uint64(0x7F)
#: Bit 7 of every byte: set in one addend, it carries a 7-bit group's overflow into the next byte.
_GAPS: Final = 0x8080_8080_8080_8080


def _spread(value: int) -> int:
    """`value`'s 7-bit groups, one to a byte (a varint's bytes without their continuation bits)."""
    out, shift = 0, 0
    while value:
        out |= (value & 0x7F) << shift
        value >>= 7
        shift += 8
    return out


#: ``_spread`` of 0..1023: the offsets of a batch's seq_nums from its first (batches hold at most 1000).
_SPREAD_OFFSETS: Final = np.array([_spread(i) for i in range(1024)], dtype=np.uint64)
#: Records' lengths below this (1- and 2-byte varints: records up to about 16 KiB) are looked up...
_TABLED_LENGTHS: Final = 1 << 14
#: ...here: ``0a <length>`` as a little-endian integer, one gather instead of a varint's arithmetic.
_LENGTH_FIELDS: Final = np.array(
    [0x0A | int.from_bytes(varint(c), "little") << 8 for c in range(_TABLED_LENGTHS)], dtype=np.uint64
)


class Pieces(NamedTuple):
    """Where each record's stored part lies: ``buffer[start:start + length]`` (buffer 0 or 1 of the two given
    to `build_read_form`; one number when all are in the same), and whether a ``22`` key goes before it (a
    body-only record stored as its ``AppendRecord`` encoding, cut after its ``1a`` key; one value for all or
    one each)."""

    buffer: int | Ints
    start: Ints
    length: Ints
    body_key: bool | npt.NDArray[np.bool_]


class ReadForm(NamedTuple):
    """The records field of a ``ReadBatch`` holding every record of a batch, and where each record starts in
    it (``offsets[n]`` is its length)."""

    data: memoryview
    offsets: Ints

    def span(self, i: int, j: int) -> memoryview:
        """The records field of a ``ReadBatch`` of records ``[i, j)`` of the batch."""
        return self.data[int(self.offsets[i]) : int(self.offsets[j])]


def _size(value: int) -> int:
    """Bytes in the shortest varint of `value`."""
    return max(1, (value.bit_length() + 6) // 7)


def varint_size(values: npt.NDArray[np.int64] | npt.NDArray[np.uint64]) -> Sizes:
    """Bytes in the shortest varint of each (non-negative) value: one number if they are all the same."""
    small, large = _size(int(values.min())), _size(int(values.max()))
    if small == large:
        return small
    return np.searchsorted(_VARINT_LIMITS, values.astype(np.uint64), side="right").astype(np.int64) + 1


def _varint_words(values: npt.NDArray[np.uint64], sizes: Sizes) -> Words:
    """The varints of `values` (of `sizes` bytes, at most 8) as little-endian integers."""
    out = values & _LOW7
    for k in range(1, int(np.max(sizes))):
        out |= ((values >> np.uint64(7 * k)) & _LOW7) << np.uint64(8 * k)
    out |= _CONTINUATION[sizes]
    return out


def _seq_words(first: int, n: int) -> tuple[Words, Sizes]:
    """The varints of seq_nums ``first .. first + n - 1`` as little-endian integers, and their sizes.

    Spread groups add like digits once bit 7 of every byte of one addend is set (a group's overflow carries
    through it into the next byte): spread(first + i) is (spread(first) | gaps) + spread(i), less the gaps."""
    groups = (_SPREAD_OFFSETS[:n] + np.uint64(_spread(first) | _GAPS)) & np.uint64(~_GAPS & (2**64 - 1))
    small, large = _size(first), _size(first + n - 1)
    if small == large:
        return groups | _CONTINUATION[small], small
    # One size boundary at most (batches hold fewer than 2**14 records): below it the smaller size.
    sizes = np.where(np.arange(first, first + n) >= 1 << (7 * small), large, small)
    return groups | _CONTINUATION[sizes], sizes


def _put_inline(views: npt.NDArray[np.uint32], lo: Words, lo_bytes: Sizes, hi: Words, size: Sizes) -> None:
    """Write inline views of `size` bytes: `lo`'s first `lo_bytes` bytes (at most 8), then `hi`'s."""
    shift = np.asarray(lo_bytes * 8).astype(np.uint64)
    low = lo | (hi << shift)  # numpy shifts by 64 to 0: then nothing of `hi` is in the low word
    views[:, 0] = size
    views[:, 1] = low  # the low 32 bits (numpy's assignment truncates)
    views[:, 2] = low >> np.uint64(32)
    views[:, 3] = hi >> (np.uint64(64) - shift)


def build_read_form(
    first_seq: int, timestamps: int | Stamps, pieces: Pieces, buffers: tuple[bytes, bytes]
) -> ReadForm:
    """The read form of a batch whose records start at seq_num `first_seq`, stamped `timestamps` (one for
    all or one each), with stored parts `pieces` in `buffers`."""
    n = len(pieces.length)
    last_ts = timestamps if isinstance(timestamps, int) else int(timestamps.max())
    too_big = first_seq + n > _BULK_BELOW or last_ts >= _BULK_BELOW
    if not HAS_BINARY_VIEW or n < _BULK_FROM or n > len(_SPREAD_OFFSETS) or too_big:
        return _record_by_record(first_seq, timestamps, pieces, buffers)
    key = pieces.body_key
    views = np.zeros((_PER_RECORD * n, 4), dtype=np.uint32)
    stamp = views[1::_PER_RECORD]
    ts_size: Sizes
    if isinstance(timestamps, int):
        # One timestamp for the whole batch: its view is one of two values, with or without the ``22``.
        field = b"\x10" + varint(timestamps)
        bare, keyed = _inline_view(field), _inline_view(field + b"\x22")
        stamp[:] = (keyed if key else bare) if isinstance(key, bool) else np.where(key[:, None], keyed, bare)
        ts_size = len(field) - 1
    else:
        ts_size = varint_size(timestamps)
        ts_field = (_varint_words(timestamps, ts_size) << np.uint64(8)) | np.uint64(0x10)
        _put_inline(stamp, ts_field, 1 + ts_size, np.asarray(key * 0x22).astype(np.uint64), 1 + ts_size + key)
    seq_words, seq_size = _seq_words(first_seq, n)
    content = (pieces.length + (2 + ts_size)) + (seq_size + key)
    content_size = varint_size(content)
    if np.max(content_size) > 3:
        return _record_by_record(first_seq, timestamps, pieces, buffers)  # not a record of at most 1 MiB
    if int(content.max()) < _TABLED_LENGTHS:
        length_field = _LENGTH_FIELDS[content]
    else:
        length_words = _varint_words(content.astype(np.uint64), content_size)
        length_field = (length_words << np.uint64(8)) | np.uint64(0x0A)
    seq_field = (seq_words << np.uint64(8)) | np.uint64(0x08)
    _put_inline(views[0::_PER_RECORD], length_field, 1 + content_size, seq_field, 2 + content_size + seq_size)
    _part_views(views[2::_PER_RECORD], pieces, buffers)
    data_buffers = [pa.py_buffer(b) for b in buffers]
    joined = pa.Array.from_buffers(pa.binary_view(), len(views), [None, pa.py_buffer(views), *data_buffers])
    # Into memory from malloc, not Arrow's own pool: the stored forms this replaces were malloc's (Python
    # bytes), and are freed right after, so the next batch's form reuses their pages instead of faulting in
    # fresh ones (about a third of the first read's CPU, measured).
    out = pc.cast(joined, pa.large_binary(), memory_pool=pa.system_memory_pool())
    offsets = np.frombuffer(out.buffers()[1], dtype=np.int64)[::_PER_RECORD].copy()
    data = out.buffers()[2]
    return ReadForm(memoryview(data) if data is not None else memoryview(b""), offsets)


def _inline_view(value: bytes) -> npt.NDArray[np.uint32]:
    """The view of a value of at most 12 bytes: its length, then its bytes, zero padded."""
    return np.frombuffer(len(value).to_bytes(4, "little") + value.ljust(_INLINE, b"\0"), dtype=np.uint32)


def _record_by_record(
    first_seq: int, timestamps: int | Stamps, pieces: Pieces, buffers: tuple[bytes, bytes]
) -> ReadForm:
    """`build_read_form` one record at a time: for a small batch, where a Python step per record costs less
    than numpy's calls, and for seq_nums or timestamps too large to build in bulk."""
    n = len(pieces.length)
    stamps = [timestamps] * n if isinstance(timestamps, int) else timestamps.tolist()
    where = [pieces.buffer] * n if isinstance(pieces.buffer, int) else pieces.buffer.tolist()
    keys = [pieces.body_key] * n if isinstance(pieces.body_key, bool) else pieces.body_key.tolist()
    items: list[bytes] = []
    offsets = [0]
    for x, (b, start, length, key) in enumerate(
        zip(where, pieces.start.tolist(), pieces.length.tolist(), keys, strict=True)
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


def _part_views(views: npt.NDArray[np.uint32], pieces: Pieces, buffers: tuple[bytes, bytes]) -> None:
    """The stored parts' views: a 4-byte length, then either the bytes themselves (up to 12, zero padded) or
    their first four bytes, the buffer's index and the offset (little-endian)."""
    length = pieces.length
    views[:, 0] = length
    if isinstance(pieces.buffer, int) and int(length.min()) > _INLINE:
        # The usual batch: every part in one buffer, and longer than a view holds.
        views[:, 1] = _unaligned_u32(buffers[pieces.buffer])[pieces.start]
        views[:, 2] = pieces.buffer
        views[:, 3] = pieces.start
        return
    buffer = np.full(len(length), pieces.buffer) if isinstance(pieces.buffer, int) else pieces.buffer
    short = length <= _INLINE
    for b, stored in enumerate(buffers):
        if not stored:
            continue  # only empty parts can point here, and their views are all zeros
        mine = buffer == b
        long_ = np.flatnonzero(mine & ~short)
        if len(long_):
            start = pieces.start[long_]
            views[long_, 1] = _unaligned_u32(stored)[start]
            views[long_, 2] = b
            views[long_, 3] = start
        inline = np.flatnonzero(mine & short & (length > 0))
        if len(inline):
            src = np.frombuffer(stored, dtype=np.uint8)
            held = src[np.minimum(pieces.start[inline, None] + np.arange(_INLINE), len(src) - 1)]
            held[length[inline, None] <= np.arange(_INLINE)] = 0
            views[inline, 1:] = held.view(np.uint32)


def _unaligned_u32(data: bytes) -> npt.NDArray[np.uint32]:
    """``out[k]`` is the little-endian integer of ``data[k : k + 4]`` (a view, no copy)."""
    return np.ndarray((max(len(data) - 3, 0),), dtype="<u4", buffer=data, strides=(1,))
