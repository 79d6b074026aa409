"""A stream's state and the two things done to it: sequencing appends and collecting records for reads.

Appends are sequenced immediately (so pipelined appends and ``match_seq_num`` see in-flight batches) but
become *visible* to reads and ``check_tail`` only once durable; with no data directory that is at once.
"""

from __future__ import annotations

import asyncio
import bisect
from array import array
from dataclasses import dataclass, field
from itertools import accumulate

from s2_sink.lite._api_errors import fencing_token_mismatch, invalid, seq_num_mismatch
from s2_sink.lite._append_input import ParsedInput, parse_input
from s2_sink.lite._batch import Batch, sequenced
from s2_sink.lite._clock import rfc3339
from s2_sink.lite._configs import Json
from s2_sink.lite._wire import RawList, pb

__all__ = ["ReadResult", "Stream"]

_MAX_U64 = (1 << 64) - 1
_TERMINAL_TRIM: bytes = pb.AppendInput(
    records=[
        pb.AppendRecord(
            timestamp=_MAX_U64, headers=[pb.Header(name=b"", value=b"trim")], body=_MAX_U64.to_bytes(8, "big")
        )
    ]
).SerializeToString()


@dataclass(slots=True)
class ReadResult:
    """Records gathered by ``Stream.collect``."""

    #: The records field of a ``ReadBatch`` holding them (``0a <len> <SequencedRecord>`` each).
    encoded: bytes
    next_seq: int
    count: int
    nbytes: int
    #: The ``until`` bound was met: no later record can qualify.
    until_reached: bool

    @property
    def records(self) -> list[bytes]:
        """Each record's ``SequencedRecord`` encoding."""
        return list(RawList.FromString(self.encoded).items) if self.encoded else []


@dataclass(eq=False)
class Stream:
    """A stream's state: sequencing tail, visible (durable) tail, fencing token, trim point and batches."""

    basin: str
    name: str
    config: Json
    created_at: float
    next_seq: int = 0
    last_ts: int = 0
    visible_seq: int = 0
    visible_ts: int = 0
    fencing_token: str = ""
    trim_point: int = 0
    #: The basin's ``stream_cipher`` when it was created (shown; records are not encrypted here).
    cipher: str | None = None
    #: The ``s2-request-token`` and config of the create call, so a retried create is answered as a success.
    creation_key: tuple[str, Json] | None = None
    #: Deleted or being deleted: sessions on it end, new requests get 409 ``stream_deletion_pending``.
    deleted: bool = False
    #: When the deletion was asked for (epoch seconds); the stream is gone once it completes.
    deleted_at: float | None = None
    batches: list[Batch] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    last_ts_list: list[int] = field(default_factory=list)
    _changed: asyncio.Event | None = None

    def info(self) -> Json:
        """StreamInfo JSON."""
        deleted_at = rfc3339(self.deleted_at) if self.deleted_at is not None else None
        return {
            "name": self.name,
            "created_at": rfc3339(self.created_at),
            "deleted_at": deleted_at,
            "cipher": self.cipher,
        }

    def tail(self) -> tuple[int, int]:
        """The visible tail: next seq_num and the last record's timestamp."""
        return self.visible_seq, self.visible_ts

    def changed(self) -> asyncio.Event:
        """An event set the next time the visible tail moves (or the stream is deleted)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def notify(self) -> None:
        """Wake readers waiting on ``changed``."""
        ev = self._changed
        if ev is not None:
            self._changed = None
            ev.set()

    def make_visible(self, end: int, last_ts: int) -> None:
        """Expose records up to ``end`` to readers (called once they are durable)."""
        if end > self.visible_seq:
            self.visible_seq = end
            self.visible_ts = max(self.visible_ts, last_ts)
            self.notify()

    # -- appends ---------------------------------------------------------------------------------------------

    def sequence(self, data: bytes | ParsedInput, arrival: int, *, terminal: bool = False) -> Batch:
        """Validate and sequence one encoded ``AppendInput``; returns the (not yet visible) batch.

        Raises ApiError 400/412/422. Checks happen before any state changes, so a failed append has no
        effect. As S2's streamer (``sequence_records``): the fencing token, then ``match_seq_num``, are
        checked against the state before this batch, then each record's timestamp is assigned. A `terminal`
        batch (the trim record of a deletion) changes neither the trim point nor the fencing token.
        """
        p = data if isinstance(data, ParsedInput) else parse_input(data)
        n = len(p.parts)
        ts_cfg = self.config["timestamping"]
        mode = ts_cfg["mode"]
        uncapped = bool(ts_cfg.get("uncapped"))
        client_ts = p.client_ts
        commands = p.commands
        ts_list: list[int] | None = None
        if p.fencing_token is not None and p.fencing_token != self.fencing_token:
            raise fencing_token_mismatch(self.fencing_token)
        if p.match_seq_num is not None and p.match_seq_num != self.next_seq:
            raise seq_num_mismatch(self.next_seq)
        if mode == "client-require" and len(client_ts) != n:
            raise invalid("record timestamp was required but was missing")
        prev = self.last_ts
        if not client_ts or mode == "arrival":
            ts0 = max(arrival, prev)
            last_ts = ts0
        else:
            ts_list = []
            cur = prev
            for i in range(n):
                t = client_ts.get(i, arrival)
                if not uncapped and t > arrival:
                    t = arrival
                cur = max(cur, t)
                ts_list.append(cur)
            ts0 = ts_list[0]
            last_ts = cur
        start = self.next_seq
        batch = Batch(
            start,
            sequenced(start, ts0 if ts_list is None else ts_list, p.parts),
            array("q", accumulate(p.sizes)),
            ts0=ts0,
            ts_list=ts_list,
            last_ts=last_ts,
            arrival=arrival,
        )
        for i, op, body in () if terminal else commands:
            if op == b"fence":
                self.fencing_token = body.decode()
            else:
                desired = int.from_bytes(body, "big")
                self.trim_point = max(self.trim_point, min(desired, start + i + 1))
        self.add_batch(batch)
        return batch

    def sequence_terminal(self, arrival: int) -> Batch:
        """The ``trim`` command record to the last seq_num that S2 appends to a stream it deletes
        (``streamer.rs``, ``terminal_trim_input``: timestamp ``u64::MAX``, capped as any client timestamp)."""
        return self.sequence(_TERMINAL_TRIM, arrival, terminal=True)

    def add_batch(self, batch: Batch) -> None:
        """Record a sequenced batch (also used by log replay)."""
        self.batches.append(batch)
        self.starts.append(batch.start)
        self.last_ts_list.append(batch.last_ts)
        self.next_seq = batch.end
        self.last_ts = batch.last_ts
        self._drop_trimmed()

    def _drop_trimmed(self) -> None:
        k = 0
        while k < len(self.batches) - 1 and self.batches[k].end <= self.trim_point:
            k += 1
        if k:
            del self.batches[:k], self.starts[:k], self.last_ts_list[:k]

    # -- retention -------------------------------------------------------------------------------------------

    def expire(self, cutoff_ms: int) -> bool:
        """Trim the durable batches that arrived before ``cutoff_ms`` (whole batches, like S2, which may keep
        expired records readable for a while); True if the trim point moved."""
        new = self.trim_point
        for b in self.batches:
            if b.arrival >= cutoff_ms or b.start >= self.visible_seq:
                break
            new = max(new, min(b.end, self.visible_seq))
        if new <= self.trim_point:
            return False
        self.trim_point = new
        self._drop_trimmed()
        return True

    def is_empty(self) -> bool:
        """No record is retained (never written, or all trimmed) and none is on its way."""
        return self.first_seq() >= self.next_seq

    def last_write_s(self) -> float:
        """When the newest batch arrived (the creation time if there is none), in epoch seconds."""
        return self.batches[-1].arrival / 1000 if self.batches else self.created_at

    # -- reads -----------------------------------------------------------------------------------------------

    def seq_for_timestamp(self, ts: int) -> int:
        """The first visible seq_num whose timestamp is >= ``ts`` (the visible tail if none)."""
        k = bisect.bisect_left(self.last_ts_list, ts)
        while k < len(self.batches):
            b = self.batches[k]
            if b.start >= self.visible_seq:
                break
            for i in range(b.end - b.start):
                if b.ts(i) >= ts:
                    return max(b.start + i, self.trim_point)
            k += 1
        return self.visible_seq

    def first_seq(self) -> int:
        """The first readable seq_num (after trimming)."""
        if self.batches:
            return max(self.trim_point, self.batches[0].start)
        return self.next_seq

    def collect(self, start: int, max_count: int, max_bytes: int, until: int | None) -> ReadResult:
        """Visible records from ``start``: at most ``max_count`` records and ``max_bytes`` metered bytes."""
        start = max(start, self.first_seq())
        spans: list[bytes] = []
        count = 0
        nbytes = 0
        seq = start
        limit = self.visible_seq
        until_reached = False
        k = bisect.bisect_right(self.starts, seq) - 1
        k = max(k, 0)
        batches = self.batches
        while seq < limit and count < max_count and k < len(batches):
            b = batches[k]
            i = seq - b.start
            if i < 0:
                i = 0
                seq = b.start
            stop = min(b.end, limit, seq + (max_count - count))
            j = stop - b.start
            if until is not None and b.last_ts >= until:
                # Cut at the first record at or past ``until``.
                jj = i
                while jj < j and b.ts(jj) < until:
                    jj += 1
                if jj < j:
                    j = jj
                    until_reached = True
            if b.metered_between(i, j) + nbytes > max_bytes:
                # The byte budget runs out inside this batch: stop after the last record that fits.
                j = b.fitting(i, j, max_bytes - nbytes)
                max_count = count + (j - i)
            if j > i:
                nbytes += b.metered_between(i, j)
                spans.append(b.span(i, j))
                count += j - i
            seq = b.start + j
            if until_reached or j < (stop - b.start):
                break
            k += 1
        encoded = spans[0] if len(spans) == 1 else b"".join(spans)
        return ReadResult(encoded, seq, count, nbytes, until_reached)
