"""The query parameters of a read and the rules (416, clamping, trimming) that turn them into a start."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

from s2_sink.lite._errors import bad, invalid, read_unwritten
from s2_sink.lite._stream import Stream

__all__ = ["ReadParams"]


@dataclass(slots=True)
class ReadParams:
    """Query parameters of a read."""

    seq_num: int | None = None
    timestamp: int | None = None
    tail_offset: int | None = None
    count: int | None = None
    nbytes: int | None = None
    until: int | None = None
    clamp: bool = False
    wait: int | None = None

    @property
    def bounded(self) -> bool:
        """A count, bytes or until bound is set."""
        return self.count is not None or self.nbytes is not None or self.until is not None

    @classmethod
    def parse(cls, query: str) -> ReadParams:
        """Parse the query string; 400 ``bad_query`` on junk, 422 on contradictory starts."""
        p = cls()
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key == "clamp":
                if value not in ("true", "false", ""):
                    raise bad("bad_query", f"clamp must be true or false, got {value!r}")
                p.clamp = value == "true"
                continue
            attr = {"bytes": "nbytes"}.get(key, key)
            if attr not in ("seq_num", "timestamp", "tail_offset", "count", "nbytes", "until", "wait"):
                continue
            try:
                n = int(value)
            except ValueError as exc:
                raise bad("bad_query", f"{key} must be a non-negative integer, got {value!r}") from exc
            if n < 0:
                raise bad("bad_query", f"{key} must be a non-negative integer, got {value!r}")
            setattr(p, attr, n)
        starts = [x for x in (p.seq_num, p.timestamp, p.tail_offset) if x is not None]
        if len(starts) > 1:
            raise invalid("give at most one of seq_num, timestamp, tail_offset")
        # A zero limit means no limit.
        if p.count == 0:
            p.count = None
        if p.nbytes == 0:
            p.nbytes = None
        if p.until is not None and p.timestamp is not None and p.timestamp >= p.until:
            raise invalid(f"start timestamp {p.timestamp} must be less than until {p.until}")
        return p

    def resume(self, last_event_id: str) -> tuple[int, int]:
        """Continue an SSE session from the ``id`` of the last batch the client saw (``seq,count,bytes``).

        The read restarts at that seq_num with the ``count``/``bytes`` bounds reduced by what was delivered;
        returns (records, metered bytes) delivered so far, from which later ids keep counting.
        """
        parts = last_event_id.split(",")
        if len(parts) != 3 or not all(x.isdigit() for x in parts):
            raise bad("bad_header", f"last-event-id must be <seq_num>,<count>,<bytes>, got {last_event_id!r}")
        seq, count, nbytes = map(int, parts)
        self.seq_num, self.timestamp, self.tail_offset = seq, None, None
        if self.count is not None:
            self.count = max(self.count - count, 0)
        if self.nbytes is not None:
            self.nbytes = max(self.nbytes - nbytes, 0)
        return count, nbytes

    @property
    def exhausted(self) -> bool:
        """A resumed read whose count or bytes bound was already met: nothing more to send."""
        return self.count == 0 or self.nbytes == 0

    def resolve_start(self, stream: Stream, can_follow: bool) -> int:
        """The first seq_num to read, applying the 416 rules."""
        tail_seq, tail_ts = stream.tail()
        if self.seq_num is not None:
            start = self.seq_num
            if start > tail_seq:
                if not self.clamp:
                    raise read_unwritten(tail_seq, tail_ts)
                start = tail_seq
        elif self.timestamp is not None:
            if self.timestamp > tail_ts and not self.clamp:
                raise read_unwritten(tail_seq, tail_ts)
            start = stream.seq_for_timestamp(self.timestamp)
        elif self.tail_offset is not None:
            start = max(tail_seq - self.tail_offset, 0)
        else:
            start = tail_seq
        start = max(start, stream.first_seq()) if start < tail_seq else start
        if start >= tail_seq and not can_follow:
            raise read_unwritten(tail_seq, tail_ts)
        return start
