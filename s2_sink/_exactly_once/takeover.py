"""Take-overs between exactly-once identities, decided on evidence: an identity whose ledger is empty goes on
from an earlier identity of the same query (docs/exactly-once.md, *Take-overs*)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from s2_sdk import S2Basin

from s2_sink._exactly_once.fencing import writer_hash
from s2_sink._exactly_once.ledger import Ledger, LedgerState, ledger_stream_name, peek_all
from s2_sink._exactly_once.shape import WriteShape
from s2_sink._exactly_once.sign_in_registers import REGISTER_PREFIX
from s2_sink.config import S2Config
from s2_sink.errors import CommitError, WriterConflictError

__all__ = ["check_not_lost", "check_not_moved", "check_not_renamed", "mark_moved", "take_over"]

log = logging.getLogger(__name__)


def _described(ledger: Ledger) -> str:
    st = ledger.state
    routing = st.shapes[-1].routing if st.shapes else "(not recorded)"
    where = "committed" if st.committed >= 0 else "no batch committed"
    flight = ", the next in flight" if st.may_have_written_next else ""
    return f"{ledger.writer_id!r} ({routing}; {where} up to {st.committed}{flight})"


async def take_over(
    basin: S2Basin,
    ledger: Ledger,
    *,
    query_id: str | None,
    shape: WriteShape | None,
    batch_id: int,
    in_use: Callable[[str], bool] = lambda _: False,
    cfg: S2Config | None = None,
) -> LedgerState | None:
    """Take over the identity `ledger`'s (empty) identity goes on from, if any; its state, now `ledger`'s.
    `in_use(name)`: another writer object of this process writes as `name` in this start."""
    me = ledger.writer_id
    states = {w: st for w, st in (await peek_all(basin, cfg=cfg)).items() if w != me and st.kind != "none"}
    found: list[Ledger] = []
    for name, state in states.items():
        other = Ledger(basin, name, cfg=cfg)
        other.state = state
        if query_id is None or not _names_query(state, name, query_id):
            _refuse_in_flight_elsewhere(me, other, query_id, shape)
        elif state.moved_to == me:  # a take-over of ours that a crash interrupted: finish it
            return await _move(ledger, other)
        elif state.moved_to is not None:  # points at its successor, a candidate in its own right
            if state.moved_to not in states and _related(state, shape):
                # The successor's take-over was cut between its two appends: finish it, go on from it.
                successor = Ledger(basin, state.moved_to, cfg=cfg)
                await successor.load()
                if successor.state.kind == "none":
                    await _move(successor, other)
                found.append(successor)
        elif not in_use(name):  # else another writer of this query, writing in this start
            found.append(other)
    return await _decide(ledger, found, shape, batch_id)


async def _decide(
    ledger: Ledger, found: list[Ledger], shape: WriteShape | None, batch_id: int
) -> LedgerState | None:
    """Take over the one of `found` with this routing; else refuse if one has `batch_id`."""
    me = ledger.writer_id
    related = [f for f in found if _related(f.state, shape)]
    if len(related) > 1:
        raise WriterConflictError(
            f"writer_id {me!r}: several ledgers wrote this query's batches with its routing "
            f"({', '.join(_described(f) for f in related)}); name the writer explicitly (writer_id=...) with "
            "the one to go on from"
        )
    if related:
        return await _move(ledger, related[0])
    blocking = [f for f in found if f.state.may_have_written_next or batch_id <= f.state.committed]
    if blocking:
        mine = shape.routing if shape is not None else "(not recorded)"
        raise WriterConflictError(
            f"writer_id {me!r} ({mine}) starts without a ledger at micro-batch {batch_id}, and this "
            f"query's ledger {', '.join(_described(f) for f in blocking)} has that batch in flight or "
            "committed under another routing. It is either another writer of this query, or this "
            "writer's before a rename that also changed its routing; the two cannot be told apart, and a "
            f"wrong guess would write micro-batch {batch_id} twice or lose it. If it is another writer of "
            "the query, call that writer before this one in the foreachBatch function (it goes on from its "
            "ledger, and this one then starts anew); if it is this writer, restart once with its previous "
            f"writer_id and routing so micro-batch {batch_id} finishes, then change both"
        )
    return None


def _names_query(state: LedgerState, name: str, query_id: str) -> bool:
    """Whether ledger `name` wrote query `query_id`'s batches: it records that id, or is named by it and
    records none (an earlier version)."""
    return state.query_id == query_id or (name == query_id and state.query_id is None)


def _related(state: LedgerState, shape: WriteShape | None) -> bool:
    """Whether the routing recorded last is `shape`'s (or either is unknown)."""
    return shape is None or not state.shapes or state.shapes[-1].routing == shape.routing


def _refuse_in_flight_elsewhere(
    me: str, other: Ledger, query_id: str | None, shape: WriteShape | None
) -> None:
    """Where query ids cannot be compared, a batch in flight with this routing under another identity may
    be this writer's, renamed: WriterConflictError."""
    state = other.state
    comparable = query_id is not None and state.query_id is not None
    same_routing = shape is not None and bool(state.shapes) and _related(state, shape)
    if comparable or not same_routing or state.moved_to is not None or state.kind not in ("open", "intent"):
        return
    batch = state.intent if state.intent is not None else state.committed + 1
    raise WriterConflictError(
        f"writer_id {me!r} writes with routing {shape.routing if shape else '-'}, where writer_id "
        f"{other.writer_id!r} has micro-batch {batch} in flight (its ledger has no commit for it) and the "
        "query id that would tell whether both are the same query is not known here. If this is the same "
        f"query under a new writer_id, restart it once with writer_id={other.writer_id!r} to finish that "
        "batch exactly once, then rename; if that batch is abandoned, run "
        f"`s2-sink ledger reset {other.writer_id}`"
    )


async def _move(ledger: Ledger, old: Ledger) -> LedgerState:
    """Mark `old` moved to `ledger`'s identity, then copy its state there (both conditional appends)."""
    me = ledger.writer_id
    await mark_moved(old, me)
    carried = replace(old.state, moved_to=None, writer=old.state.writer or writer_hash(old.writer_id))
    await ledger.append(carried)
    log.warning(
        "exactly-once: writer %s takes over from writer %s (its ledger: %s of batch %s, epoch %s): "
        "batches it committed are not written again, and a batch it left half-written is recovered",
        me,
        old.writer_id,
        carried.kind,
        carried.committed,
        carried.epoch,
    )
    return ledger.state


async def mark_moved(old: Ledger, me: str) -> None:
    """Make `old` say it moved to `me`; WriterConflictError if another identity took it first."""
    await old.load()
    if old.state.moved_to is None:
        try:
            await old.append(replace(old.state, moved_to=me))
        except WriterConflictError as exc:  # another append landed first: whose?
            await old.load()
            if old.state.moved_to in (None, me):
                raise
            raise _claimed(me, old.writer_id, old.state.moved_to) from exc
    elif old.state.moved_to != me:
        raise _claimed(me, old.writer_id, old.state.moved_to)


def _claimed(me: str, old: str, other: str) -> WriterConflictError:
    return WriterConflictError(
        f"writer_id {me!r} would take over writer_id {old!r}, but writer_id {other!r} took it over first "
        "(two drivers of the query starting together under new writer ids?). One query has one writer per "
        f"target: stop the other driver, or write as {other!r}"
    )


async def check_not_renamed(
    basin: S2Basin, writer_id: str, query_id: str | None, *, cfg: S2Config | None = None
) -> None:
    """``format("s2")`` (which does not know its batch, so takes nothing over): refuse a new identity for a
    query whose batches another identity's ledger holds (a renamed ``s2.writer-id``)."""
    if query_id is None:
        return
    states = {w: st for w, st in (await peek_all(basin, cfg=cfg)).items() if w != writer_id}
    holders = [w for w, st in states.items() if _names_query(st, w, query_id) and st.moved_to is None]
    if holders:
        raise WriterConflictError(
            f"option s2.writer-id: this query ({query_id}) wrote its micro-batches as writer_id "
            f"{holders[0]!r}, and now writes as {writer_id!r}, whose ledger is empty: a batch in flight or "
            f"committed under {holders[0]!r} would be written again. Write as {holders[0]!r} (set "
            f"s2.writer-id={holders[0]} again, or drop it if that is the query id); a new query (a new "
            "checkpoint) may take any new name"
        )


def check_not_moved(state: LedgerState, writer_id: str) -> None:
    if state.moved_to is None:
        return
    raise WriterConflictError(
        f"writer_id {writer_id!r} was taken over by writer_id {state.moved_to!r}, which goes on with its "
        f"batches: write as {state.moved_to!r}; a writer of another target of the query needs a writer_id of "
        "its own"
    )


async def check_not_lost(basin: S2Basin, writer_id: str) -> None:
    """Refuse an empty ledger whose sign-in registers exist: it was deleted, with what it committed."""
    prefix = f"{REGISTER_PREFIX}{writer_id}/"
    async for info in basin.list_all_streams(prefix=prefix):
        if info.name[len(prefix) :].isdigit():  # a partition's register, not another writer id's below
            raise CommitError(
                f"exactly-once: the ledger of writer_id {writer_id!r} ({ledger_stream_name(writer_id)}) "
                f"is empty, but its task attempts' sign-in registers ({prefix}...) exist: the ledger was "
                "deleted or recreated empty, and with it which micro-batches were committed or left half "
                "written. The writer stops rather than write a batch Spark replays a second time. To go on, "
                "accepting that the batches in flight around the loss may be written twice, delete the "
                f"streams under {prefix} and restart the query"
            )
