"""``ReadBatch`` messages taken in as they arrive and decoded together, a run of them at a time.

A read session receives messages of at most 1000 records. Decoding each alone pays the fixed cost of every
numpy and Arrow call per message; walking each as it arrives (`skim`: where its records lie, its last
seq_num and its tail, which the session needs at once to resume or stop) and decoding a run of them in one
go (`decode_skims`) pays it once per run. A message the walk cannot read is parsed whole on arrival.
"""

from __future__ import annotations

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

__all__ = ["Arrival", "ReadRun"]


class Arrival(NamedTuple):
    """What a message brought: its records' count, the last one's seq_num (None with no records), its tail."""

    records: int
    last_seq_num: int | None
    tail: Tail | None


class ReadRun:
    """The records of the messages added since the last `take`, in order."""

    def __init__(self) -> None:
        self._parts: list[Skim | RecordColumns] = []
        self.records = 0
        """Records held."""
        self.size = 0
        """Bytes of the messages held."""

    def add(self, message: bytes) -> Arrival:
        """Hold the records of one serialized ``ReadBatch``."""
        skimmed = skim(message)
        last = None if skimmed is None else skimmed.last_seq_num()
        if skimmed is None or (skimmed.starts and last is None):  # not canonical: the parser says how
            columns, tail = parse_read_batch(message)
            if len(columns):
                last = int(columns.seq_nums[-1])
                self._hold(columns, len(columns), len(message))
            return Arrival(len(columns), last, tail)
        if skimmed.starts:
            self._hold(skimmed, len(skimmed.starts), len(message))
        return Arrival(len(skimmed.starts), last, skimmed.tail)

    def take(self) -> RecordColumns:
        """Every record held (at least one), decoded; the run is then empty."""
        decoded: list[RecordColumns] = []
        skims: list[Skim] = []
        for part in self._parts:
            if isinstance(part, Skim):
                skims.append(part)
                continue
            if skims:
                decoded.append(decode_skims(skims))
                skims = []
            decoded.append(part)
        if skims:
            decoded.append(decode_skims(skims))
        self._parts, self.records, self.size = [], 0, 0
        return concat_columns(decoded)

    def _hold(self, part: Skim | RecordColumns, records: int, size: int) -> None:
        self._parts.append(part)
        self.records += records
        self.size += size
