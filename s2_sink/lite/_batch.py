"""One sequenced batch as stored: its records as reads send them, their timestamps and metered sizes."""

from __future__ import annotations

import bisect
from itertools import accumulate, count, repeat

from s2_sink.lite._wire import varint

__all__ = ["Batch", "sequenced_records"]


class Batch:
    """One appended batch, atomic: records ``[start, end)``.

    It is stored in one form, the one reads send: each record's ``SequencedRecord`` encoding (``08 <seq_num>
    10 <timestamp> <headers and body>``), made when the batch is sequenced. A read of records ``[i, j)``
    writes ``records[i:j]`` as a ``ReadBatch`` records field (`RawList`, in C), cut at a byte budget by the
    running totals of the records' metered sizes; the durable log writes them the same way.
    """

    __slots__ = ("arrival", "end", "last_ts", "metered", "records", "start", "ts0", "ts_list")

    def __init__(
        self,
        start: int,
        records: list[bytes],
        sizes: list[int],
        *,
        ts0: int,
        ts_list: list[int] | None,
        last_ts: int,
        arrival: int = 0,
    ) -> None:
        self.start = start
        self.end = start + len(records)
        #: Each record's ``SequencedRecord`` encoding.
        self.records = records
        #: Running totals of the records' metered sizes.
        self.metered = list(accumulate(sizes))
        self.ts0 = ts0
        #: Per-record timestamps; None when every record got ``ts0``.
        self.ts_list = ts_list
        self.last_ts = last_ts
        #: When the batch arrived (ms since the epoch): retention ages count from here.
        self.arrival = arrival

    def ts(self, i: int) -> int:
        """Timestamp of the i-th record of the batch."""
        return self.ts0 if self.ts_list is None else self.ts_list[i]

    def sizes(self) -> list[int]:
        """Each record's metered size."""
        return [b - a for a, b in zip([0, *self.metered], self.metered, strict=False)]

    def metered_between(self, i: int, j: int) -> int:
        """Metered bytes of records ``[i, j)`` of the batch."""
        if j <= i:
            return 0
        return self.metered[j - 1] - (self.metered[i - 1] if i else 0)

    def fitting(self, i: int, j: int, budget: int) -> int:
        """The largest ``k`` in ``[i, j]`` with records ``[i, k)`` of at most `budget` metered bytes."""
        base = self.metered[i - 1] if i else 0
        return bisect.bisect_right(self.metered, base + budget, i, j)


def sequenced_records(first_seq: int, timestamps: int | list[int], parts: list[bytes]) -> list[bytes]:
    """The ``SequencedRecord`` encodings of records with headers-and-body `parts`, numbered from `first_seq`
    and stamped `timestamps` (one for all or one each): ``08 <seq_num> 10 <timestamp> <part>``, seq_num and
    timestamp written out also when 0."""
    stamps = repeat(timestamps) if isinstance(timestamps, int) else timestamps
    out: list[bytes] = []
    append = out.append
    last, stamp = -1, b""
    for seq, ts, part in zip(count(first_seq), stamps, parts):
        if ts != last:  # timestamps mostly repeat: their field is made once for each run
            last, stamp = ts, b"\x10" + varint(ts)
        append(b"\x08" + varint(seq) + stamp + part)
    return out
