"""The ledger: one S2 stream per writer identity recording its runs and committed micro-batches.

Appends are conditional on the tail this driver last saw: a second driver under the same identity fails
with WriterConflictError instead of interleaving (docs/exactly-once.md, *Ledger*)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import Any, Final, Literal, TypeVar

from s2_sdk import (
    AppendInput,
    CommandRecord,
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

from s2_sink._exactly_once.ledger_records import (
    EndsFold,
    LedgerState,
    check_not_reset,
    encode_state,
    parse_record,
    record_base,
    state_of,
)
from s2_sink._exactly_once.shape import WriteShape, shapes_of
from s2_sink._transport.explain import explain, is_stream_deleting
from s2_sink._transport.retry import Patience, Retrying, patiently, retryable
from s2_sink._transport.runtime import create_if_missing
from s2_sink.config import S2Config
from s2_sink.errors import CommitError, WriterConflictError

__all__ = [
    "LEDGER_PREFIX",
    "Ledger",
    "LedgerState",
    "current_ledgers_of",
    "forget_created",
    "ledger_stream_name",
    "peek_all",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

LEDGER_PREFIX: Final = "_s2sink/ledger/"
_APPEND_BYTES: Final = 512 * 1024  # one conditional append, inside S2's 1 MiB
# Infinite retention: losing the last record would restart epochs below the streams' fences.
_LEDGER_CONFIG: Final = StreamConfig(retention_policy="infinite")
_FIRST_WINDOW: Final = 16  # records read back from the tail for the last state record (then 8x more)
# (basin, ledger) this process created or found: a long-lived driver worker opens it once per micro-batch.
_created: set[tuple[str, str]] = set()


def forget_created() -> None:
    _created.clear()


def ledger_stream_name(writer_id: str) -> str:
    return LEDGER_PREFIX + writer_id


async def peek_all(
    basin: S2Basin, *, cfg: S2Config | None = None, skip_unreadable: bool = False
) -> dict[str, LedgerState]:
    """Every writer id with a ledger in the basin, and its last state; creates nothing. A ledger that cannot
    be read whole is a CommitError (it may hold the query's batches), left out with `skip_unreadable`."""
    out: dict[str, LedgerState] = {}
    async for info in basin.list_all_streams(prefix=LEDGER_PREFIX):
        writer_id = info.name[len(LEDGER_PREFIX) :]
        try:
            peeked = await Ledger(basin, writer_id, cfg=cfg).peek()
        except CommitError as exc:
            if not skip_unreadable:
                raise CommitError(
                    f"exactly-once: a writer identity without a ledger looks through the basin's ledgers for "
                    f"its query's micro-batches, and the ledger of writer_id {writer_id!r} cannot be read "
                    f"whole ({exc}): it may hold them, so the writer stops rather than write them twice. If "
                    f"that ledger holds no batches of a query still running, delete the stream {info.name!r}"
                ) from exc
            log.info("ledger %s cannot be read; left out of the lookup", writer_id)
            continue
        if peeked is not None:
            out[writer_id] = peeked[1]
    return out


def current_ledgers_of(states: dict[str, LedgerState], query_id: str) -> list[str]:
    """The writer ids whose ledgers (of `peek_all`) hold query `query_id`'s batches now (not taken over)."""
    return [w for w, st in states.items() if st.query_id == query_id and st.moved_to is None]


class Ledger:
    """Reads and conditionally appends the ledger stream of one writer identity (driver side)."""

    def __init__(
        self, basin: S2Basin, writer_id: str, *, cfg: S2Config | None = None, patience: Patience | None = None
    ) -> None:
        self.name = ledger_stream_name(writer_id)
        self._cfg = cfg  # names the endpoint and the fix in errors
        self._patience = patience or (Patience.of(cfg) if cfg is not None else Patience())
        self.writer_id = writer_id
        self._basin = basin
        self._stream: S2Stream = basin.stream(self.name)
        self.state = LedgerState()
        self.tail: int | None = None  # next seq_num, as last observed
        self._state_at = -1  # seq_num of the last state record

    async def load(self) -> LedgerState:
        """Create the ledger if needed and read its state (retried until the delivery deadline)."""

        async def read() -> tuple[int, LedgerState, int]:
            if (self._basin.name, self.name) not in _created:
                # One that exists keeps its config: an ensure would reset what an operator changed.
                await create_if_missing(self._basin, self.name, _LEDGER_CONFIG)
                _created.add((self._basin.name, self.name))
            tail = (await self._stream.check_tail()).seq_num
            state, at = LedgerState(), -1
            if tail > 0:
                state, at = await self._read_state(tail)
            else:
                await self._retain_forever()
            return tail, state, at

        tail, state, at = await self._reading(read)
        self.state, self.tail, self._state_at = state, tail, at
        return state

    async def _retain_forever(self) -> None:
        """An empty ledger may have been created by a reader in a basin that creates streams on read, with
        the basin's retention: make it infinite (a token that may not is told in the log)."""
        try:
            config = await self._basin.get_stream_config(self.name)
            if config.retention_policy != "infinite":
                await self._basin.reconfigure_stream(self.name, config=_LEDGER_CONFIG)
                log.warning(
                    "ledger %s was created with retention %r (a read created it: the basin creates "
                    "streams on read); its retention is now infinite",
                    self.name,
                    config.retention_policy,
                )
        except S2ServerError as exc:
            if exc.status_code != 403:
                raise
            log.warning("ledger %s: cannot check its retention is infinite (403 %s)", self.name, exc.code)

    async def peek(self, seen: tuple[int, LedgerState] | None = None) -> tuple[int, LedgerState] | None:
        """The tail and state for a reader (None: no ledger); `seen` again while the tail has not moved."""

        async def read() -> tuple[int, LedgerState] | None:
            try:
                tail = (await self._stream.check_tail()).seq_num
            except S2ServerError as exc:
                if exc.code == "stream_not_found" or is_stream_deleting(exc):
                    return None
                raise
            if seen is not None and seen[0] == tail:
                return seen
            return tail, (await self._read_state(tail))[0] if tail > 0 else LedgerState()

        return await self._reading(read)

    async def _reading(self, read: Callable[[], Awaitable[T]]) -> T:
        try:
            return await patiently(self._patience, f"reading the exactly-once ledger {self.name!r}", read)
        except S2Error as exc:
            raise CommitError(
                f"cannot read the exactly-once ledger {self.name!r}: {self._words(exc)}"
            ) from exc

    def _words(self, exc: BaseException) -> str:
        return explain(exc, self._cfg, stream=self.name).message if self._cfg is not None else str(exc)

    async def _read_state(self, tail: int) -> tuple[LedgerState, int]:
        window = _FIRST_WINDOW
        while True:
            start = max(0, tail - window)
            last: tuple[int, dict[str, Any]] | None = None
            async for seq, doc in self.records(start, tail):
                if doc["kind"] != "ends":
                    last = (seq, doc)
            if last is not None:
                break
            if start == 0:  # only command records (trims, fences) or orphan pieces are left
                raise self._gone()
            window *= 8
        at, doc = last
        state = await self.state_at_record(at, doc)
        if state is None:  # the records its ends fold from were trimmed by something else
            raise self._gone()
        return state, at

    def _gone(self) -> CommitError:
        return CommitError(
            f"the exactly-once ledger {self.name!r} has records but no state record (it was trimmed or "
            "overwritten by something else): write under a new writer_id (s2.writer-id for format('s2'))"
        )

    async def state_at_record(self, at: int, doc: dict[str, Any]) -> LedgerState | None:
        """The state of state record `doc` at `at`; None when the records from its base on were trimmed."""
        base, fold, first = record_base(doc, at), EndsFold(), None
        async for seq, piece in self.records(base, at + 1):
            first = seq if first is None else first
            fold.add(piece)
        if first != base:
            return None
        return state_of(doc, fold.ends, base, fold.since, self.name)

    async def records(self, start: int, end: int) -> AsyncIterator[tuple[int, dict[str, Any]]]:
        """The ledger documents in ``[start, end)`` without command records. Not `readback.read_span`: a
        read's planning loads the ledger without the write side; its callers retry the whole read."""
        pos = start
        while pos < end:
            batch = await self._stream.read(
                start=SeqNum(pos), limit=ReadLimit(count=min(1000, end - pos)), clamp_to_tail=True
            )
            if not batch.records:
                return
            for rec in batch.records:
                if rec.seq_num >= end:
                    return
                if not rec.is_command_record():
                    yield rec.seq_num, parse_record(rec.body, self.name)
            pos = batch.records[-1].seq_num + 1

    async def _send(self, bodies: list[bytes], expected: int) -> int:
        groups: list[list[Record]] = [[]]
        size = 0
        for body in bodies:
            if groups[-1] and (size + len(body) + 8 > _APPEND_BYTES or len(groups[-1]) >= 1000):
                groups.append([])
                size = 0
            groups[-1].append(Record(body=body))
            size += len(body) + 8
        tail = expected
        for records in groups:
            ack = await self._stream.append(AppendInput(records=records, match_seq_num=tail))
            tail = ack.end.seq_num
        return tail

    async def _trim(self, base: int) -> None:
        """Drop the records before the latest snapshot (best effort: an untrimmed ledger is only longer)."""
        assert self.tail is not None
        try:
            ack = await self._stream.append(
                AppendInput(records=[CommandRecord.trim(base)], match_seq_num=self.tail)
            )
        except S2Error as exc:
            log.info("ledger %s: trim to %s not applied (%s); the next snapshot trims", self.name, base, exc)
            return
        self.tail = ack.end.seq_num

    async def append(self, state: LedgerState) -> None:
        """Append `state` if nobody else appended since we last looked; else WriterConflictError. After a
        transient failure the ledger is re-read (ours may have landed) and the append repeated only if no
        other state record landed; loading ignores pieces whose state record did not land."""
        if self.tail is None:
            raise CommitError("ledger not loaded")  # a programming error, not a user one
        # A mismatch is retried too: the tail moved without a state record (a trim, pieces of a group).
        retrying = Retrying(
            self._patience,
            f"appending to the exactly-once ledger {self.name!r}",
            retry_on=lambda exc: retryable(exc) or isinstance(exc, SeqNumMismatchError),
        )
        while True:
            expected, known = self.tail, self._state_at
            bodies, placed, snapshot = encode_state(self.state, state, expected)
            try:
                end = await self._send(bodies, expected)
            except SeqNumMismatchError as exc:
                last: S2Error = exc  # somebody appended: our own earlier attempt, or another driver
            except S2Error as exc:
                if not retryable(exc):
                    raise CommitError(
                        f"cannot append to the exactly-once ledger {self.name!r}: {self._words(exc)}"
                    ) from exc
                last = exc  # the append may or may not have landed
            else:
                retrying.progress()
                self.state, self.tail, self._state_at = placed, end, end - 1
                if snapshot and placed.base > 0:
                    await self._trim(placed.base)
                return
            delay = retrying.wait(last)  # None past the deadline: raised once the ledger says what landed
            found = await self.load()
            if found == state:
                log.info("ledger %s: our record landed despite %s", self.name, type(last).__name__)
                retrying.progress()
                return
            if self._state_at != known:
                raise WriterConflictError(
                    f"writer_id {self.writer_id!r}: another driver appended to the ledger {self.name!r} "
                    f"(its last record is a {found.kind!r} of run {found.run!r}, epoch {found.epoch}; this "
                    f"run is {state.run!r}). Two queries cannot share a writer identity: stop the other one "
                    "or give each its own writer_id"
                ) from last
            if delay is None:
                words = self._words(retrying.give_up(last))
                raise CommitError(
                    f"cannot append to the exactly-once ledger {self.name!r}: {words}"
                ) from last
            await asyncio.sleep(delay)

    @property
    def state_at(self) -> int | None:
        return self._state_at if self._state_at >= 0 else None

    def resume(self, state: LedgerState, tail: int) -> None:
        """Go on from a state this writer appended, unread: the next append's condition catches staleness."""
        self.state, self.tail, self._state_at = state, tail, tail - 1

    def opened(self, run: str, query_id: str | None, scope: Literal["run", "batch"] = "run") -> LedgerState:
        """The `open` record of a new run; a recorded query id stays (the ledger belongs to that query)."""
        recorded = self.state.query_id if self.state.query_id is not None else query_id
        return replace(
            self.state, kind="open", epoch=self.state.epoch + 1, run=run, query_id=recorded, scope=scope
        )

    def intended(self, batch_id: int, run: str, shape: WriteShape | None = None) -> LedgerState:
        """The ``intent`` announcing `batch_id` before its tasks start (so a ledger ending in a commit has
        nothing in flight), with `shape` added to the shapes in flight."""
        shapes = shapes_of(self.state.shapes, shape, committed=False)
        return replace(self.state, kind="intent", run=run, intent=batch_id, announces=True, shapes=shapes)

    def committed(
        self,
        batch_id: int,
        ends: dict[str, int],
        query_id: str | None = None,
        shape: WriteShape | None = None,
    ) -> LedgerState:
        """The `commit` of `batch_id`: `query_id` (the tasks') where the ``open`` had none, `shape` the only
        one left; ends below the ledger's are a recreated stream (`check_not_reset`)."""
        check_not_reset(self.state.ends, ends, self.writer_id)
        merged = dict(self.state.ends)
        for stream, end in ends.items():
            merged[stream] = max(end, merged.get(stream, 0))
        seen = self.state.query_id if self.state.query_id is not None else query_id
        shapes = shapes_of(self.state.shapes, shape, committed=True)
        return replace(
            self.state,
            kind="commit",
            committed=batch_id,
            ends=merged,
            query_id=seen,
            intent=None,
            shapes=shapes,
        )
