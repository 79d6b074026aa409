"""``ReadBatch`` messages taken in as they arrive and decoded together, a run of them at a time.

A read session receives messages of at most 1000 records. Decoding each alone pays the fixed cost of every
numpy and Arrow call per message; walking each as it arrives (`skim`: where its records lie, its last
seq_num and its tail, which the session needs at once to resume or stop) and decoding a run of them in one
go (`decode_skims`) pays it once per run. A message the walk cannot read is parsed whole on arrival.

A run is taken undecoded (`Held`) and decoded with others (`decode_held`): a task that reads many small
streams holds a run of a few records per stream, and decoding the runs of several streams together pays the
fixed cost once for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from s2_sink._wire.read.record_columns import (
    RecordColumns,
    Skim,
    Tail,
    concat_columns,
    decode_skims,
    parse_read_batch,
    skim,
)

__all__ = ["Arrival", "Held", "ReadRun", "decode_held"]


class Arrival(NamedTuple):
    """What a message brought: its records' count, the last one's seq_num (None with no records), its tail."""

    records: int
    last_seq_num: int | None
    tail: Tail | None


class Held(NamedTuple):
    """A run taken and not decoded yet: its parts (walked messages, or records parsed on arrival) in order."""

    parts: tuple[Skim | RecordColumns, ...]
    records: int
    """Records held (at least one)."""
    last_seq_num: int
    """The last record's seq_num."""

    @classmethod
    def of(cls, columns: RecordColumns) -> Held:
        """Records already decoded (at least one), held as a run."""
        return cls((columns,), len(columns), int(columns.seq_nums[-1]))


def decode_held(runs: Sequence[Held]) -> list[RecordColumns]:
    """The records of each of ``runs``, decoded together: walked messages that follow one another, of one
    run or of several, are decoded in one go (`decode_skims`), then the records are cut back into runs."""
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
    """``columns`` cut into consecutive slices of ``sizes`` records (views, not copies)."""
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
        """Records held."""
        self.size = 0
        """Bytes of the messages held."""
        self._last_seq_num = -1

    def add(self, message: bytes) -> Arrival:
        """Hold the records of one serialized ``ReadBatch``."""
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
        """Every record held (at least one), not decoded yet (`decode_held`); the run is then empty."""
        held = Held(tuple(self._parts), self.records, self._last_seq_num)
        self._parts, self.records, self.size = [], 0, 0
        return held

    def _hold(self, part: Skim | RecordColumns, records: int, size: int, last_seq_num: int) -> None:
        self._parts.append(part)
        self._last_seq_num = last_seq_num
        self.records += records
        self.size += size
