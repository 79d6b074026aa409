"""One sequenced batch as stored: its records as reads send them, their timestamps and metered sizes."""

from __future__ import annotations

import bisect
from array import array
from itertools import accumulate, count, repeat

from s2_sink.lite._wire import RawList, varint

__all__ = ["Batch", "sequenced"]


class Batch:
    """One appended batch, atomic: records ``[start, end)``.

    It is stored in one form, the one reads send: the records field of a ``ReadBatch`` holding all of them
    (``0a <len> 08 <seq_num> 10 <timestamp> <headers and body>`` each), made when the batch is sequenced, with
    the running totals of their metered sizes. A read of records ``[i, j)`` is one slice of it, cut at a byte
    budget by those totals; the durable log writes it as it is. One buffer per batch, not an object per
    record: a stream holding millions of records costs the allocator little.
    """

    __slots__ = ("_ends", "arrival", "data", "end", "last_ts", "metered", "start", "ts0", "ts_list")

    def __init__(
        self,
        start: int,
        data: bytes,
        metered: array[int],
        *,
        ts0: int,
        ts_list: list[int] | None,
        last_ts: int,
        arrival: int = 0,
    ) -> None:
        self.start = start
        self.end = start + len(metered)
        #: The records field of a ``ReadBatch`` of every record of the batch.
        self.data = data
        #: Where each record ends in ``data``, found on the first read of part of the batch.
        self._ends: array[int] | None = None
        #: Running totals of the records' metered sizes.
        self.metered = metered
        self.ts0 = ts0
        #: Per-record timestamps; None when every record got ``ts0``.
        self.ts_list = ts_list
        self.last_ts = last_ts
        #: When the batch arrived (ms since the epoch): retention ages count from here.
        self.arrival = arrival

    def ts(self, i: int) -> int:
        """Timestamp of the i-th record of the batch."""
        return self.ts0 if self.ts_list is None else self.ts_list[i]

    def span(self, i: int, j: int) -> bytes:
        """The records field of a ``ReadBatch`` of records ``[i, j)`` of the batch."""
        if i == 0 and j == self.end - self.start:
            return self.data
        if j <= i:
            return b""
        if self._ends is None:
            self._ends = _ends_of(RawList.FromString(self.data).items)
        return self.data[self._ends[i - 1] if i else 0 : self._ends[j - 1]]

    def metered_between(self, i: int, j: int) -> int:
        """Metered bytes of records ``[i, j)`` of the batch."""
        if j <= i:
            return 0
        return self.metered[j - 1] - (self.metered[i - 1] if i else 0)

    def fitting(self, i: int, j: int, budget: int) -> int:
        """The largest ``k`` in ``[i, j]`` with records ``[i, k)`` of at most `budget` metered bytes."""
        base = self.metered[i - 1] if i else 0
        return bisect.bisect_right(self.metered, base + budget, i, j)


def sequenced(first_seq: int, timestamps: int | list[int], parts: list[bytes]) -> bytes:
    """Records with headers-and-body `parts`, numbered from `first_seq` and stamped `timestamps` (one for all
    or one each), as the records field of a ``ReadBatch``: each record ``08 <seq_num> 10 <timestamp> <part>``,
    seq_num and timestamp written out also when 0."""
    stamps = repeat(timestamps) if isinstance(timestamps, int) else timestamps
    records: list[bytes] = []
    append = records.append
    last, stamp = -1, b""
    for seq, ts, part in zip(count(first_seq), stamps, parts):
        if ts != last:  # timestamps mostly repeat: their field is made once for each run
            last, stamp = ts, b"\x10" + varint(ts)
        append(b"\x08" + varint(seq) + stamp + part)
    out: bytes = RawList(items=records).SerializeToString()
    return out


def _ends_of(records: list[bytes]) -> array[int]:
    """Where each of `records` ends in their ``RawList`` encoding (``0a <len> <record>`` each; a record is
    less than 2 MiB, so its length takes at most 3 bytes)."""
    return array("q", accumulate(n + (2 if n < 0x80 else 3 if n < 0x4000 else 4) for n in map(len, records)))
