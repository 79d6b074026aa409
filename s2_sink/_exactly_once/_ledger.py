"""The ledger: one S2 stream per writer identity recording its runs and committed micro-batches.

Stream ``_s2sink/ledger/<writer_id>`` in the target basin. Every record is a JSON snapshot of the whole
state, so reading only the last record recovers it (O(1) I/O per micro-batch)::

    {"v": 1, "kind": "open"|"commit", "epoch": 3, "run": "<uuid>", "query_id": "<spark query id>"|null,
     "committed": 41, "ends": {"<stream>": <seq_num after our last committed write>, ...}, "scope": "run"}

- ``open``: a driver run starts; ``epoch`` = previous + 1 (the fencing epoch of that run). ``scope`` says
  what the epoch may write: ``run`` (`S2Writer`: every micro-batch of a driver run) or ``batch``
  (``format("s2")``: one execution of one micro-batch). Records without ``scope`` are ``run``.
- ``commit``: micro-batch ``committed`` is fully written; ``ends`` are lower bounds for where the next
  batch's records can start (read-back starts there on the recovery path).

Every append carries ``match_seq_num`` = the tail this driver last saw, so a second driver using the same
identity makes one of them fail with WriterConflictError instead of interleaving.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

import orjson
from s2_sdk import (
    AppendInput,
    ReadLimit,
    Record,
    S2Basin,
    S2Error,
    S2ServerError,
    S2Stream,
    SeqNum,
    SeqNumMismatchError,
    StreamConfig,
)

from s2_sink._retry import Backoff, retryable
from s2_sink.errors import CommitError, WriterConflictError

__all__ = ["LEDGER_PREFIX", "Ledger", "LedgerState", "ledger_stream_name"]

log = logging.getLogger(__name__)

LEDGER_PREFIX: Final = "_s2sink/ledger/"
_VERSION: Final = 1
# Waits between ledger append attempts (eight in all): 0.1 s doubling to 2 s.
_BACKOFF: Final = Backoff(first=0.1, cap=2.0, retries=7, jitter=False)

# Ledgers this process already created or found, as (basin, stream): a format("s2") driver loads its ledger
# once per micro-batch from a long-lived Python worker, and needs the create-if-missing call only once.
_ensured: set[tuple[str, str]] = set()


def ledger_stream_name(writer_id: str) -> str:
    """The ledger stream of a writer identity."""
    return LEDGER_PREFIX + writer_id


@dataclass(frozen=True, slots=True)
class LedgerState:
    """The state after the ledger's last record (or the empty state of a new writer)."""

    kind: Literal["none", "open", "commit"] = "none"
    epoch: int = 0
    run: str = ""
    query_id: str | None = None
    committed: int = -1
    ends: dict[str, int] = field(default_factory=dict)
    scope: Literal["run", "batch"] = "run"

    @property
    def may_have_written_next(self) -> bool:
        """Whether the epoch of this state may have written part of the micro-batch after `committed`.

        An uncommitted ``open`` may have; so may a ``run``-scoped epoch after its last commit (it goes on to
        the next micro-batch); a ``batch``-scoped epoch ends with its one commit.
        """
        return self.kind == "open" or (self.kind == "commit" and self.scope == "run")

    def to_json(self) -> bytes:
        doc: dict[str, Any] = {
            "v": _VERSION,
            "kind": self.kind,
            "epoch": self.epoch,
            "run": self.run,
            "query_id": self.query_id,
            "committed": self.committed,
            "ends": self.ends,
            "scope": self.scope,
        }
        return orjson.dumps(doc)

    @classmethod
    def from_json(cls, body: bytes, where: str) -> LedgerState:
        try:
            doc = orjson.loads(body)
            if doc.get("v") != _VERSION or doc["kind"] not in ("open", "commit"):
                raise ValueError(f"unknown ledger record version/kind: {doc.get('v')!r}/{doc.get('kind')!r}")
            return cls(
                kind=doc["kind"],
                epoch=int(doc["epoch"]),
                run=str(doc["run"]),
                query_id=doc.get("query_id"),
                committed=int(doc["committed"]),
                ends={str(k): int(v) for k, v in doc["ends"].items()},
                scope="batch" if doc.get("scope") == "batch" else "run",
            )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise CommitError(f"ledger {where!r} has an unreadable last record: {exc}") from exc


class Ledger:
    """Reads and conditionally appends the ledger stream of one writer identity (driver side)."""

    def __init__(self, basin: S2Basin, writer_id: str) -> None:
        self.name = ledger_stream_name(writer_id)
        self.writer_id = writer_id
        self._basin = basin
        self._stream: S2Stream = basin.stream(self.name)
        self.state = LedgerState()
        self.tail: int | None = None  # next seq_num, as last observed by this driver

    async def load(self) -> LedgerState:
        """Create the ledger stream if needed, then read its last record."""
        try:
            key = (self._basin.name, self.name)
            if key not in _ensured:
                # Infinite retention: losing the last record would restart epochs below the streams' fences.
                await self._basin.ensure_stream(self.name, config=StreamConfig(retention_policy="infinite"))
                _ensured.add(key)
            tail = (await self._stream.check_tail()).seq_num
            state = LedgerState()
            if tail > 0:
                batch = await self._stream.read(
                    start=SeqNum(tail - 1), limit=ReadLimit(count=1), ignore_command_records=True
                )
                if batch.records:
                    state = LedgerState.from_json(batch.records[-1].body, self.name)
        except S2Error as exc:
            raise CommitError(f"cannot read the exactly-once ledger {self.name!r}: {exc}") from exc
        self.state, self.tail = state, tail
        return state

    async def append(self, state: LedgerState) -> None:
        """Append `state` if nobody else appended since we last looked; else WriterConflictError.

        Transient failures (5xx, 408, 429, transport errors) are retried: after each, the ledger is re-read
        — our record may have landed — and the append is repeated only if the tail has not moved. The
        condition (``match_seq_num``) makes a repeated append impossible to apply twice.
        """
        if self.tail is None:
            raise CommitError("ledger not loaded")  # a programming error, not a user one
        expected = self.tail
        waits = _BACKOFF.delays()
        last: Exception | None = None
        while True:
            try:
                ack = await self._stream.append(
                    AppendInput(records=[Record(body=state.to_json())], match_seq_num=expected)
                )
            except SeqNumMismatchError as exc:
                last = exc
            except S2ServerError as exc:
                if not retryable(exc):
                    raise CommitError(
                        f"cannot append to the exactly-once ledger {self.name!r}: {exc}"
                    ) from exc
                last = exc
            except S2Error as exc:  # transport: the append may or may not have landed
                last = exc
            else:
                self.state, self.tail = state, ack.end.seq_num
                return
            found = await self.load()
            if found == state:
                log.info("ledger %s: our record landed despite %s", self.name, type(last).__name__)
                return
            if self.tail != expected:
                raise WriterConflictError(
                    f"writer_id {self.writer_id!r}: another driver appended to the ledger {self.name!r} "
                    f"(its last record is a {found.kind!r} of run {found.run!r}, epoch {found.epoch}; this "
                    f"run is {state.run!r}). Two queries cannot share a writer identity: stop the other one "
                    "or give each its own writer_id"
                ) from last
            delay = next(waits, None)
            if delay is None:
                raise CommitError(
                    f"cannot append to the exactly-once ledger {self.name!r} after "
                    f"{_BACKOFF.retries + 1} attempts: {last}"
                ) from last
            await asyncio.sleep(delay)

    def resume(self, state: LedgerState, tail: int) -> None:
        """Continue from a state this writer appended itself (at `tail`) without reading the ledger again;
        a stale view is caught by the next conditional append."""
        self.state, self.tail = state, tail

    def opened(self, run: str, query_id: str | None, scope: Literal["run", "batch"] = "run") -> LedgerState:
        """The `open` record of a new run on top of the current state.

        The query id, once recorded, stays: the ledger belongs to that query (`check_identity`), and an
        open record must not make another query's batches look like its own.
        """
        recorded = self.state.query_id if self.state.query_id is not None else query_id
        return replace(
            self.state, kind="open", epoch=self.state.epoch + 1, run=run, query_id=recorded, scope=scope
        )

    def committed(self, batch_id: int, ends: dict[str, int], query_id: str | None = None) -> LedgerState:
        """The `commit` record of `batch_id` on top of the current state; `query_id`, the query id the
        tasks saw, is recorded when the ``open`` record could not know it."""
        merged = dict(self.state.ends)
        for stream, end in ends.items():
            merged[stream] = max(end, merged.get(stream, 0))
        seen = self.state.query_id if self.state.query_id is not None else query_id
        return replace(self.state, kind="commit", committed=batch_id, ends=merged, query_id=seen)
