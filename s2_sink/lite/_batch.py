"""One sequenced batch as stored: its records, timestamps and (lazily) their metered sizes."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from s2_sink.lite._read_form import Pieces, ReadForm, build_read_form, varint_size
from s2_sink.lite._wire import RawList, pb

__all__ = ["Batch"]


def _metered_of_tail(tail: bytes) -> int:
    """Metered size (8 + 2*headers + names + values + body) of a stored headers-and-body part."""
    n = len(tail)
    if n == 0:
        return 8
    if tail[0] == 0x22:
        b1 = tail[1]
        if b1 < 0x80 and n == 2 + b1:
            return 8 + b1
        if b1 >= 0x80 and n >= 3 and tail[2] < 0x80 and n == 3 + ((b1 & 0x7F) | (tail[2] << 7)):
            return 8 + n - 3
    rec = pb.SequencedRecord.FromString(tail)
    return 8 + len(rec.body) + sum(2 + len(h.name) + len(h.value) for h in rec.headers)


class Batch:
    """One appended batch, atomic: records ``[start, end)``.

    A plain batch (every record body-only, the common case) keeps just the ``AppendInput`` encoding it came
    in; the per-record ``AppendRecord`` encodings are cut out of it (in C) on the first read. A mostly plain
    one (body-only records but a few, such as an exactly-once chunk's tagged first record) is kept the same
    way, with the headers-and-body parts of those few aside in ``exceptions``. A batch with headers on
    its records, read in bulk, keeps one ``RawList`` encoding of their headers-and-body parts (its records
    field renumbered), also cut on the first read. Other batches keep headers-and-body parts of
    ``SequencedRecord`` per record.
    """

    __slots__ = (
        "_lengths",
        "_metered",
        "_metered_sizes",
        "_read_form",
        "_records",
        "arrival",
        "end",
        "exceptions",
        "last_ts",
        "payload",
        "plain",
        "start",
        "ts0",
        "ts_list",
    )

    def __init__(
        self,
        start: int,
        end: int,
        *,
        records: list[bytes] | None,
        payload: bytes | None,
        ts0: int,
        ts_list: list[int] | None,
        last_ts: int,
        arrival: int = 0,
        exceptions: dict[int, bytes] | None = None,
        plain: bool | None = None,
        metered: npt.NDArray[np.int64] | None = None,
        lengths: npt.NDArray[np.int32] | None = None,
    ) -> None:
        self.start = start
        self.end = end
        self._records = records
        #: Until its records are first read (the log writes it): the AppendInput encoding of a plain batch,
        #: or the RawList encoding of the headers-and-body parts of any other.
        self.payload = payload
        #: Records are ``AppendRecord`` encodings of body-only records (but those in ``exceptions``); by
        #: default, a batch kept as its payload is plain.
        self.plain = records is None if plain is None else plain
        #: Plain batch: index in the batch -> headers-and-body part, for its records that are not body-only
        #: (their entries in ``records`` are the ``AppendRecord`` encodings they came in, not to be read).
        self.exceptions: dict[int, bytes] = exceptions or {}
        self.ts0 = ts0
        #: Per-record timestamps; None when every record got ``ts0``.
        self.ts_list = ts_list
        self.last_ts = last_ts
        #: When the batch arrived (ms since the epoch): retention ages count from here.
        self.arrival = arrival
        self._metered: npt.NDArray[np.int64] | None = None
        #: The records' metered sizes where the append counted them (running totals are made on first use).
        self._metered_sizes = metered
        #: The lengths of the items of ``payload``'s records field where the append measured them.
        self._lengths = lengths
        #: The records as read (`_read_form`), made on the first read; the stored forms are dropped then.
        self._read_form: ReadForm | None = None

    @property
    def records(self) -> list[bytes]:
        """Per-record encodings (see ``plain``)."""
        if self._records is None:
            if self.payload is not None:
                self._records = list(RawList.FromString(self.payload).items)
                self.payload = None
            else:
                assert self._read_form is not None
                self._records = self._records_of_read_form(self._read_form)
        return self._records

    def read_form(self) -> ReadForm:
        """The records as a ``ReadBatch`` records field (`build_read_form`), made once on first use.

        Once made, it is the batch's only copy of its records: ``records`` is rebuilt from it if asked for."""
        if self._read_form is None:
            if self._records is not None:
                lengths = np.fromiter(map(len, self._records), dtype=np.int64, count=len(self._records))
                stored = b"".join(self._records)
                content = np.cumsum(lengths) - lengths
            else:
                assert self.payload is not None
                stored = self.payload
                items = None
                if self._lengths is not None:
                    lengths = self._lengths.astype(np.int64)
                elif (found := _lengths_by_keys(stored, self.end - self.start)) is not None:
                    lengths = found
                else:
                    items = RawList.FromString(stored).items
                    lengths = np.fromiter(map(len, items), dtype=np.int64, count=len(items))
                # Each item is ``0a <length varint> <content>``, back to back from byte 0 as a serializer
                # writes them (the plain form was checked canonical, so its varints are the shortest).
                end = np.cumsum(lengths + (1 + varint_size(lengths)))
                content = end - lengths
                if not _records_lead(stored, end):
                    # Another field first or between (valid protobuf, if no serializer's layout): the
                    # records, as parsed, joined.
                    items = RawList.FromString(stored).items if items is None else items
                    stored = b"".join(items)
                    content = np.cumsum(lengths) - lengths
            stamps = self.ts0 if self.ts_list is None else np.asarray(self.ts_list, dtype=np.uint64)
            form = build_read_form(self.start, stamps, *self._pieces(stored, content, lengths))
            self._note_metered(stored, content, lengths)
            self._read_form = form
            self.payload = None
            self._records = None
            self._lengths = None
        return self._read_form

    def _pieces(
        self, stored: bytes, content: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
    ) -> tuple[Pieces, tuple[bytes, bytes]]:
        """Where each record's stored part lies: in `stored` (at `content`, `lengths` bytes) or, for a plain
        batch's exceptions, in a buffer of their own."""
        if not self.plain:
            return Pieces(0, content, lengths, False), (stored, b"")
        # Body-only ``AppendRecord``: the bytes after its ``1a`` key (none for an empty record).
        if int(lengths.min()) > 0 and not self.exceptions:
            return Pieces(0, content + 1, lengths - 1, True), (stored, b"")
        n = len(lengths)
        body_key = lengths > 0
        buffer = np.zeros(n, np.int64)
        start = content + body_key
        length = lengths - body_key
        aside = b""
        if self.exceptions:
            at = np.fromiter(self.exceptions, dtype=np.int64, count=len(self.exceptions))
            parts = list(self.exceptions.values())
            part_len = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
            aside = b"".join(parts)
            buffer[at], start[at], length[at], body_key[at] = (
                1,
                np.cumsum(part_len) - part_len,
                part_len,
                False,
            )
        return Pieces(buffer, start, length, body_key), (stored, aside)

    def _note_metered(
        self, stored: bytes, content: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
    ) -> None:
        """Note the records' metered sizes, from their stored forms where the append did not count them."""
        if self._metered is not None or self._metered_sizes is not None:
            return
        if self.plain:
            # ``1a <varint len> <body>``: a 1-byte varint up to 129 bytes, 2 bytes up to 16386, else 3.
            small, large = int(lengths.min()), int(lengths.max())
            if small > 0 and _body_varint(small) == _body_varint(large):
                sizes = lengths + (7 - _body_varint(small))
            else:
                sizes = np.where(
                    lengths == 0, 8, lengths + np.where(lengths <= 129, 6, np.where(lengths <= 16386, 5, 4))
                )
            for i, tail in self.exceptions.items():
                sizes[i] = _metered_of_tail(tail)
        else:
            parts = (stored[a : a + n] for a, n in zip(content.tolist(), lengths.tolist(), strict=True))
            sizes = np.fromiter(map(_metered_of_tail, parts), dtype=np.int64, count=len(lengths))
        self._metered_sizes = sizes.astype(np.int64)

    def _records_of_read_form(self, form: ReadForm) -> list[bytes]:
        """``records`` again, from the read form (each item less its seq_num and timestamp)."""
        out = [_after_position(item) for item in RawList.FromString(bytes(form.data)).items]
        if self.plain:
            out = [b"\x1a" + part[1:] if part else b"" for part in out]
            for i, tail in self.exceptions.items():
                out[i] = tail  # not read from ``records`` (the exception stands for it)
        return out

    def ts(self, i: int) -> int:
        """Timestamp of the i-th record of the batch."""
        return self.ts0 if self.ts_list is None else self.ts_list[i]

    def cumulative_metered(self) -> npt.NDArray[np.int64]:
        """Running totals of the records' metered sizes, computed once on first use."""
        if self._metered is None:
            if self._metered_sizes is None:
                self.read_form()  # notes the sizes
            assert self._metered_sizes is not None
            self._metered = np.cumsum(self._metered_sizes)
            self._metered_sizes = None
        return self._metered


def _lengths_by_keys(stored: bytes, n: int) -> npt.NDArray[np.int64] | None:
    """The lengths of the `n` records of a stored ``AppendInput`` found without parsing it, when they lead it
    and no other byte of it is ``0a`` (a records key): as with JSON bodies, which hold no raw newline. Else
    None (then the caller parses it).

    Those bytes are then exactly one per record, and where each record's length says the next starts is the
    next of them: from byte 0 on, by induction, each is a record's key (a byte 0x0a anywhere else would be one
    too many). Only a few numpy passes over the batch, where the parse makes a Python object per record."""
    d = np.frombuffer(stored, dtype=np.uint8)
    keys = np.flatnonzero(d == 0x0A)
    if len(keys) != n or keys[0] != 0 or int(keys[-1]) + 1 >= len(d):
        return None
    first = d[keys + 1].astype(np.int64)
    if int(first.max()) < 0x80:
        length, size = first, 1  # every length one byte (records up to 127 bytes)
    else:
        second = d[np.minimum(keys + 2, len(d) - 1)].astype(np.int64)
        if int(first.min()) >= 0x80 and int(second.max()) < 0x80:
            length, size = (first & 0x7F) | (second << 7), 2  # every length two bytes (up to 16 KiB)
        else:
            return _lengths_of_any_size(d, keys, first, second)
    if not np.array_equal(keys[1:], (keys + (1 + size) + length)[:-1]):
        return None
    return length


def _lengths_of_any_size(
    d: npt.NDArray[np.uint8],
    keys: npt.NDArray[np.int64],
    first: npt.NDArray[np.int64],
    second: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64] | None:
    """`_lengths_by_keys` where the lengths are varints of several sizes (of which `first` and `second`
    are the first two bytes)."""
    third = d[np.minimum(keys + 3, len(d) - 1)].astype(np.int64)
    two, three = first >= 0x80, (first >= 0x80) & (second >= 0x80)
    if (three & (third >= 0x80)).any():
        return None  # 4 bytes or more: not a record of at most 1 MiB
    length = (first & 0x7F) | np.where(two, (second & 0x7F) << 7, 0) | np.where(three, third << 14, 0)
    if not np.array_equal(keys[1:], (keys + 2 + two + three + length)[:-1]):
        return None
    return length


def _records_lead(stored: bytes, end: npt.NDArray[np.int64]) -> bool:
    """The records (ending at `end` if they lie back to back from byte 0) do: each record's key is where the
    records before it end (another field first or between would sit at one of those places)."""
    keys = np.frombuffer(stored, dtype=np.uint8)[end[:-1]] if len(end) > 1 else np.zeros(0, np.uint8)
    return bool(stored[:1] == b"\x0a" and (keys == 0x0A).all())


def _body_varint(length: int) -> int:
    """Bytes of the body's length varint in a body-only ``AppendRecord`` of `length` bytes (not 0)."""
    return 1 if length <= 129 else 2 if length <= 16386 else 3


def _after_position(item: bytes) -> bytes:
    """A ``SequencedRecord`` encoding less its leading seq_num and timestamp fields."""
    pos = 0
    for _ in range(2):
        pos += 1
        while item[pos] >= 0x80:
            pos += 1
        pos += 1
    return item[pos:]
