"""The driver side of an exactly-once epoch for both front doors: start, open, announce, commit.

`S2Writer` calls `begin_batch` / `commit_batch` per micro-batch, one epoch per start of the query;
``format("s2")`` calls `plan_execution` and `commit_batch` (`sink_run`). docs/exactly-once.md."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Literal

from s2_sdk import S2ServerError

from s2_sink import _crashpoints
from s2_sink._exactly_once.ends_cache import EndsRef
from s2_sink._exactly_once.epoch_plan import EpochPlan, already_committed, epoch_plan, newest_tokens
from s2_sink._exactly_once.fencing import Token, fence_if_older, writer_hash
from s2_sink._exactly_once.ledger import Ledger, LedgerState
from s2_sink._exactly_once.shape import WriteShape, check_restart, shapes_of
from s2_sink._exactly_once.takeover import check_not_lost, check_not_moved, check_not_renamed, take_over
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.explain import is_stream_deleting
from s2_sink._transport.retry import Patience, patiently
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config
from s2_sink.errors import ConfigError, WriterConflictError

__all__ = ["Coordinator", "check_identity", "commit_ledger"]

log = logging.getLogger(__name__)


class Coordinator:
    """Ledger and fencing for one writer identity, on the driver."""

    def __init__(
        self,
        cfg: S2Config,
        writer_id: str,
        *,
        query_id: str | None = None,
        static_streams: Sequence[str] = (),
        shape: WriteShape | None = None,
        in_use: Callable[[str, str | None], bool] | None = None,
    ) -> None:
        self.cfg = cfg
        self.writer_id = writer_id
        self.writer = writer_hash(writer_id)  # in tokens and tags: ours, or that of the identity taken over
        self.query_id = query_id
        self.shape = shape  # recorded in the ledger, checked at restarts (None: not recorded)
        # in_use(writer_id, spark_run): another writer object of this process writes as it in that start.
        self.in_use = in_use
        self.owner = uuid.uuid4().hex  # tells this coordinator from the process's others
        self.unknown_run = "the streaming query's run id cannot be read here"  # why, for the refusal
        self.static_streams = list(static_streams)
        self.run_id = uuid.uuid4().hex
        self._ledger: Ledger | None = None
        # Per stream, the newest token tasks appended with (a retry's generation), for the next batches.
        self._tokens: dict[str, str] = {}
        self._reported: list[str] = []  # the configuration changes last logged
        self._token: Token | None = None
        self._spark_run: str | None = None  # the Spark run id the open epoch serves, when readable
        self._pending: int | None = None  # a batch this run began and has not committed
        self._last: int | None = None  # the last batch this start committed or skipped

    @property
    def state(self) -> LedgerState:
        return self._ledger.state if self._ledger is not None else LedgerState()

    def begin_batch(self, batch_id: int, spark_run: str | None = None) -> EpochPlan | None:
        """The plan for `batch_id` in Spark run `spark_run`, or None when the ledger already has it."""
        return _runtime.run(self._begin(batch_id, spark_run))

    def commit_batch(self, batch_id: int, ends: Mapping[str, int]) -> None:
        """Record `batch_id` with the acks' `ends`."""
        commit_ledger(self._ledger_or_fail(), batch_id, ends, self.query_id, self.shape)
        self._pending, self._last = None, batch_id

    def remember_tokens(self, reported: Mapping[str, Iterable[str]]) -> None:
        self._tokens = newest_tokens(self._tokens, reported)

    def _is_new_start(self, batch_id: int, spark_run: str | None) -> bool:
        if self._token is None:
            return True
        if spark_run is not None and spark_run != self._spark_run:
            return True
        # Within one start a batch is committed before the next one begins, and ids only increase; a batch
        # begun and never committed was a failed call (the query failed, or the function tries again).
        return self._pending is not None

    def _check_not_called_twice(self, batch_id: int, spark_run: str | None) -> None:
        """Refuse a second call for a batch this start committed (two frames through one writer would skip
        the second). Without a run id a restart in this process looks the same and is refused too."""
        if self._pending is not None or self._last is None or batch_id > self._last:
            return
        if spark_run is not None and spark_run != self._spark_run:
            return  # a new start of the query
        unknown = (
            ""
            if spark_run is not None
            else f" ({self.unknown_run}, so a restart of the query in this process that replays the batch "
            "looks the same: restart it in a new Python process, where a new S2Writer starts from its ledger)"
        )
        raise ConfigError(
            f"S2Writer was called again for micro-batch {batch_id}, which it already wrote in this run of "
            f"the query (writer_id {self.writer_id!r}){unknown}: one S2Writer writes one frame per "
            "micro-batch. Union the frames into one, or create one S2Writer per target, each with a "
            "writer_id of its own"
        )

    async def _begin(self, batch_id: int, spark_run: str | None) -> EpochPlan | None:
        recovery = False
        self._check_not_called_twice(batch_id, spark_run)
        if self._is_new_start(batch_id, spark_run):
            if self._token is not None:
                log.warning(
                    "exactly-once: writer %s sees a new start of the query at batch %s (run %s was "
                    "serving Spark run %s, last batch %s, uncommitted %s): reloading the ledger",
                    self.writer_id,
                    batch_id,
                    self.run_id,
                    self._spark_run,
                    self._last,
                    self._pending,
                )
            # Pending from here: if loading, opening or fencing fails, the next call is a new start
            # again (a run whose open record landed must not be taken for a run in progress).
            self._spark_run, self._pending, self._last = spark_run, batch_id, None
            state = await self._start(batch_id, takes_over=True)
            if already_committed(state, self.writer_id, batch_id):
                self._pending, self._last = None, batch_id  # a second call of this batch is refused
                return None
            # A previous run may have written part of this batch before dying: replay it in recovery mode.
            recovery = state.may_have_written_next
            await self._open("run")
            log.info(
                "exactly-once: writer %s opened run %s epoch %s at batch %s (recovery=%s)",
                self.writer_id,
                self.run_id,
                self.state.epoch,
                batch_id,
                recovery,
            )
        self._pending = batch_id
        # Announce the batch before any task may write it: a ledger ending in a commit then has nothing in
        # flight, and the next start's first batch is a normal one (LedgerState.may_have_written_next).
        ledger = self._ledger_or_fail()
        await ledger.append(ledger.intended(batch_id, self.run_id, self.shape))
        return epoch_plan(
            self.cfg,
            self.writer,
            self.epoch,
            self.ends_ref(),
            recovery=recovery,
            writer_id=self.writer_id,
            tokens=self._tokens,
        )

    async def plan_execution(self) -> tuple[LedgerState, EndsRef, bool]:
        """``format("s2")``: plan the batch after the last commit (state found, ends, epoch goes on)."""
        if self._token is not None:
            ledger = self._new_ledger()
            before = await ledger.load()
            if before.kind == "commit" and (before.run, before.epoch) == (self.run_id, self.epoch):
                # The execution planned last committed and nothing was appended since: every writer of this
                # epoch is a task of an execution that committed (its zombies meet the task retry's
                # generation barrier, as S2Writer's across the batches of a run). Announce the next batch
                # under a fresh execution id, so the ledger shows whether *this* one committed.
                # A take-over keeps the last commit's run and epoch: "nothing appended since" is not enough.
                self._check(before, before.committed + 1)
                ends = self.ends_ref()
                self.run_id = uuid.uuid4().hex
                await ledger.append(ledger.intended(before.committed + 1, self.run_id, self.shape))
                return before, ends, True
        # A new epoch. Its scope stays ``batch``: each of its batches is announced by the record right
        # before it, so a commit leaves nothing in flight (docs/exactly-once.md, format("s2")).
        before = await self._start(None, takes_over=False)
        ends = self.ends_ref()  # before the open record: the ends at the state record this driver loaded
        await self._open("batch")
        return before, ends, False

    async def _start(self, at: int | None, *, takes_over: bool) -> LedgerState:
        """Load the ledger for a new epoch from batch `at` (None: the next) and check we may go on from it."""
        self.run_id = uuid.uuid4().hex
        self._token = None
        state = await self._new_ledger().load()
        at = state.committed + 1 if at is None else at
        if state.kind == "none":  # a new identity: another one may have written this query's batches
            state = await self._new_identity(state, at, takes_over=takes_over)
        self._check(state, at)
        self.writer = state.writer or writer_hash(self.writer_id)
        return state

    def _check(self, state: LedgerState, at: int) -> None:
        """Whether this writer may go on from `state` at batch `at`: its query's, not moved, its shape."""
        check_identity(state, self.writer_id, self.query_id, at)
        check_not_moved(state, self.writer_id)
        if self.shape is not None:
            in_flight = at if state.may_have_written_next and at == state.committed + 1 else None
            said = check_restart(
                state.shapes,
                self.shape,
                at=at,
                in_flight=in_flight,
                writer_id=self.writer_id,
                said=self._reported,
            )
            self._reported = said or self._reported

    async def _new_identity(self, state: LedgerState, at: int, *, takes_over: bool) -> LedgerState:
        """The state of the identity taken over, else `state`; ``format("s2")`` (its batch unknown) refuses a
        rename instead. Both refuse a lost ledger."""
        basin = get_pool().client(self.cfg).basin(self.cfg.basin)
        if takes_over:
            in_use, spark_run = self.in_use, self._spark_run
            taken = await take_over(
                basin,
                self._ledger_or_fail(),
                query_id=self.query_id,
                shape=self.shape,
                batch_id=at,
                in_use=(lambda name: in_use(name, spark_run)) if in_use is not None else (lambda _: False),
                cfg=self.cfg,
            )
            if taken is not None:
                return taken
        else:
            await check_not_renamed(basin, self.writer_id, self.query_id, cfg=self.cfg)
        await patiently(
            Patience.of(self.cfg),
            f"listing the sign-in registers of {self.writer_id!r}",
            lambda: check_not_lost(basin, self.writer_id),
        )
        return state

    def ends_ref(self) -> EndsRef:
        """The last commit's ends for the tasks: the static streams' inline, many others by reference."""
        ledger = self._ledger_or_fail()
        return EndsRef.of(self.writer_id, ledger.state, state_at=ledger.state_at, keep=self.static_streams)

    @property
    def epoch(self) -> int:
        assert self._token is not None
        return self._token.epoch

    def _ledger_or_fail(self) -> Ledger:
        assert self._ledger is not None, "the ledger is loaded before it is written"
        return self._ledger

    def _new_ledger(self) -> Ledger:
        self._ledger = Ledger(get_pool().client(self.cfg).basin(self.cfg.basin), self.writer_id, cfg=self.cfg)
        return self._ledger

    def ledger_position(self) -> tuple[LedgerState, int]:
        ledger = self._ledger_or_fail()
        assert ledger.tail is not None
        return ledger.state, ledger.tail

    async def _open(self, scope: Literal["run", "batch"]) -> None:
        """Open the next epoch (a ``batch`` scope announces the next batch) and fence the static streams."""
        ledger = self._ledger_or_fail()
        opened = ledger.opened(self.run_id, self.query_id, scope)
        if scope == "batch":
            opened = replace(opened, shapes=shapes_of(opened.shapes, self.shape, committed=False))
        await ledger.append(opened)
        self._token = Token(epoch=ledger.state.epoch, gen=0, writer=self.writer)
        await self._fence_static()

    async def _fence_static(self) -> None:
        assert self._token is not None
        written = self._ledger_or_fail().state.ends
        basin = get_pool().client(self.cfg).basin(self.cfg.basin)
        for name in self.static_streams:
            if self.cfg.create_streams:
                await get_pool().ensure_stream(self.cfg, name)
            try:
                await fence_if_older(
                    basin.stream(name),
                    self._token,
                    may_take_over=name not in written,
                    end=written.get(name),
                    writer_id=self.writer_id,
                    patience=Patience.of(self.cfg),
                )
            except S2ServerError as exc:
                if exc.status_code == 404 or is_stream_deleting(exc):
                    continue  # the tasks report the missing (or deleting) stream with the writer's own hint
                raise


def commit_ledger(
    ledger: Ledger,
    batch_id: int,
    ends: Mapping[str, int],
    query_id: str | None,
    shape: WriteShape | None,
    *,
    place: Callable[[Ledger], Awaitable[int | None]] | None = None,
) -> None:
    """Record `batch_id` with the acks' `ends` on top of the ledger's last record (WriterConflictError if
    another came since); `place` (``format("s2")``) places a new ledger where the execution left it and
    names the batch to commit."""

    async def commit() -> None:
        committed = batch_id if place is None else await place(ledger)
        if committed is not None:
            await ledger.append(ledger.committed(committed, dict(ends), query_id, shape))
            log.info(
                "exactly-once: writer %s committed batch %s (%s)",
                ledger.writer_id,
                committed,
                ledger.state.run,
            )

    _crashpoints.hit("after_tasks_before_commit", batch=batch_id)
    _runtime.run(commit())
    _crashpoints.hit("after_commit_before_spark_commit", batch=batch_id)


def check_identity(state: LedgerState, writer_id: str, query_id: str | None, batch_id: int) -> None:
    """Refuse a batch of another query (its recorded query id), or, where a query id is missing, batch ids
    going backwards (WriterConflictError): a reset checkpoint is never taken for a replay."""
    if state.kind == "none":
        return
    hint = (
        "If the checkpoint was deleted or replaced (batch ids restart at 0), give the new query a new "
        "writer_id (option s2.writer-id for format('s2')), or drop the explicit writer_id to use the new "
        "query id; if two queries run at once, give each its own writer_id"
    )
    if query_id is not None and state.query_id is not None and state.query_id != query_id:
        raise WriterConflictError(
            f"writer_id {writer_id!r} belongs to streaming query {state.query_id!r} (its ledger has "
            f"batches up to {state.committed}), but query {query_id!r} now writes batch {batch_id} "
            f"under it. {hint}"
        )
    if batch_id < state.committed:
        raise WriterConflictError(
            f"writer_id {writer_id!r}: micro-batch {batch_id} is older than the last committed "
            f"batch {state.committed} in the ledger: batch ids went backwards. {hint}"
        )
