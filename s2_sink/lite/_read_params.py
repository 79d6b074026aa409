"""The query parameters of a read and the rules that turn them into a start: S2's ``ReadStart``/``ReadEnd``
(``api/src/v1/stream/mod.rs``) and ``read_start_seq_num`` (``lite/src/backend/read.rs``).

- One of ``seq_num``, ``timestamp``, ``tail_offset`` (none: ``tail_offset=0``, the tail); two are a 422.
- ``count`` and ``bytes`` bound the read; a zero in either is a limit of zero records, not "no limit"
  (``ReadLimit::from_count_and_bytes``). ``until`` is exclusive; a ``timestamp`` start at or past it is a 422.
- A read *may follow* the tail when it has no count, bytes or until bound, or a ``wait`` above zero.
- 416 (with the tail) only when the start is past the tail (a seq_num above it, a timestamp above the last
  record's), unless ``clamp``; or when a seq_num (or tail-offset) start is exactly the tail and the read may
  not follow. A start below the trim point is not past the tail: it reads what is left (maybe nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

from s2_sink.lite._api_errors import bad, invalid, read_unwritten
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

    @property
    def zero(self) -> bool:
        """A limit of zero records (``count=0`` or ``bytes=0``): the read returns nothing."""
        return self.count == 0 or self.nbytes == 0

    def may_follow(self, *, unary: bool = False) -> bool:
        """Whether the read may wait at the tail for new records (S2's ``ReadEnd::may_follow``; a unary read
        is always bounded, by 1000 records / 1 MiB)."""
        return (not unary and not self.bounded) or bool(self.wait)

    @classmethod
    def parse(cls, query: str) -> ReadParams:
        """Parse the query string; 400 ``bad_query`` on junk, 422 on contradictory starts."""
        p = cls()
        for key, value in parse_qsl(query, keep_blank_values=True):
            if key == "clamp":
                if value not in ("true", "false"):
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
            raise invalid("only one of seq_num, timestamp, or tail_offset can be provided")
        if p.until is not None and p.timestamp is not None and p.timestamp >= p.until:
            raise invalid("start `timestamp` exceeds or equal to `until`")
        return p

    def resume(self, last_event_id: str) -> tuple[int, int]:
        """Continue an SSE session after the last batch the client saw: its ``id`` is ``<seq_num of its last
        record>,<records so far>,<metered bytes so far>`` (S2's ``LastEventId``).

        The read restarts after that seq_num with the ``count``/``bytes`` bounds reduced by what was
        delivered; returns (records, metered bytes) delivered so far, from which later ids keep counting.
        """
        parts = last_event_id.split(",")
        if len(parts) != 3 or not all(x.isdigit() for x in parts):
            raise bad("bad_header", f"Invalid header `last-event-id`: {last_event_id}")
        seq, count, nbytes = map(int, parts)
        self.seq_num, self.timestamp, self.tail_offset = seq + 1, None, None
        if self.count is not None:
            self.count = max(self.count - count, 0)
        if self.nbytes is not None:
            self.nbytes = max(self.nbytes - nbytes, 0)
        return count, nbytes

    def resolve_start(self, stream: Stream, can_follow: bool) -> int:
        """The first seq_num to read, applying the 416 rules (records below it that were trimmed are
        skipped by the read itself)."""
        tail_seq, tail_ts = stream.tail()
        if self.timestamp is not None:
            if self.timestamp > tail_ts:
                if not self.clamp:
                    raise read_unwritten(tail_seq, tail_ts)
            else:
                return stream.seq_for_timestamp(self.timestamp)
            start = tail_seq
        elif self.seq_num is not None:
            start = self.seq_num
        else:
            start = max(tail_seq - (self.tail_offset or 0), 0)
        if start > tail_seq:
            if not self.clamp:
                raise read_unwritten(tail_seq, tail_ts)
            start = tail_seq
        if start == tail_seq and not can_follow:
            raise read_unwritten(tail_seq, tail_ts)
        return start
