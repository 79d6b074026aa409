"""One sequenced batch as stored: its records, timestamps and (lazily) their metered sizes."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

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
        "_metered",
        "_metered_sizes",
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
        self._metered: list[int] | None = None
        #: The records' metered sizes where the append counted them (running totals are made on first use).
        self._metered_sizes = metered

    @property
    def records(self) -> list[bytes]:
        """Per-record encodings (see ``plain``)."""
        if self._records is None:
            assert self.payload is not None
            self._records = list(RawList.FromString(self.payload).items)
            self.payload = None
        return self._records

    def ts(self, i: int) -> int:
        """Timestamp of the i-th record of the batch."""
        return self.ts0 if self.ts_list is None else self.ts_list[i]

    def cumulative_metered(self) -> list[int]:
        """Running totals of the records' metered sizes, computed once on first use."""
        if self._metered is None:
            if self._metered_sizes is not None:
                self._metered = np.cumsum(self._metered_sizes).tolist()
                self._metered_sizes = None
                return self._metered
            if self.plain:
                # ``1a <varint len> <body>``: a 1-byte varint up to 129 bytes, 2 bytes up to 16386, else 3.
                sizes = [
                    8 if n == 0 else n + 6 if n <= 129 else n + 5 if n <= 16386 else n + 4
                    for n in map(len, self.records)
                ]
                for i, tail in self.exceptions.items():
                    sizes[i] = _metered_of_tail(tail)
            else:
                sizes = [_metered_of_tail(t) for t in self.records]
            self._metered = list(itertools.accumulate(sizes))
        return self._metered
