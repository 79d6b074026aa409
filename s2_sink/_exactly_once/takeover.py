"""Take-overs between exactly-once identities, decided rather than guessed.

A writer whose ledger is empty is either new, or goes on with what another identity wrote to the same
destination under another name: the bare query id of older versions (before identities covered the
destination), or a ``writer_id`` spelled anew on the same checkpoint (Spark Connect needs an explicit one,
so a notebook may rename it). That other identity may have committed batches Spark replays, or left one
half-written; writing as a new identity would duplicate both. So at its first start a new identity looks
for its predecessor:

- the ledger named by ``predecessor`` (the bare query id) when it names no other query, and any ledger whose
  last state names the same streaming query (both ids known) and the same destination (or none recorded);
- one found, not taken over already: take it over. Its state (epoch, committed batch, stream ends, and the
  hash its tokens and chunk tags carry) goes into this ledger, after a ``moved_to`` record in the old one;
  both appends are conditional, so two claimants cannot both win, and a crash between them is finished by
  the next start. The writer goes on exactly once from there: a half-written batch is a recovery under the
  old hash, so its records read back as ours;
- several found: `WriterConflictError` listing them (name the writer explicitly);
- none, but where a query id is unknown (Spark Connect) a ledger with the same destination has a batch in
  flight: `WriterConflictError` naming both writer ids and the fix;
- otherwise a new writer — unless its own task attempts' sign-in registers exist (`check_not_lost`): only
  a started writer has them, so its ledger was deleted or recreated empty. What it committed and left half
  written is gone with it, so the writer stops (`CommitError` naming the registers and the fix) rather than
  write again what Spark replays.

Cost: only at the first start of an identity whose ledger is empty: one listing of the basin's ledgers, one
read of each ledger's last state, and one listing of the identity's registers.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from s2_sdk import S2Basin

from s2_sink._exactly_once.fencing import writer_hash
from s2_sink._exactly_once.ledger import LEDGER_PREFIX, Ledger, LedgerState, ledger_stream_name
from s2_sink._exactly_once.roll_call import REGISTER_PREFIX
from s2_sink.config import S2Config
from s2_sink.errors import CommitError, WriterConflictError

__all__ = ["check_destination", "check_not_lost", "take_over"]

log = logging.getLogger(__name__)


async def take_over(
    basin: S2Basin,
    ledger: Ledger,
    *,
    query_id: str | None,
    destination: str | None,
    predecessor: str | None,
    cfg: S2Config | None = None,
) -> LedgerState | None:
    """Take over the predecessor of `ledger`'s (empty) identity, if it has one; its state, now `ledger`'s."""
    names = [predecessor] if predecessor is not None else []
    if destination is not None:
        listed = [
            info.name[len(LEDGER_PREFIX) :] async for info in basin.list_all_streams(prefix=LEDGER_PREFIX)
        ]
        names += [n for n in listed if n not in names]
    found: list[tuple[Ledger, LedgerState]] = []
    for name in names:
        if name == ledger.writer_id:
            continue
        other = Ledger(basin, name, cfg=cfg)
        peeked = await other.peek()
        if peeked is None or peeked[1].kind == "none":
            continue
        state = peeked[1]
        if state.moved_to is not None and state.moved_to != ledger.writer_id:
            continue  # another identity took it over
        if _continues(state, name, query_id, destination, predecessor):
            found.append((other, state))
        elif _in_flight_elsewhere(state, query_id, destination):
            raise WriterConflictError(
                f"writer_id {ledger.writer_id!r} writes to {destination}, where writer_id {name!r} has "
                f"micro-batch {state.intent if state.intent is not None else state.committed + 1} in flight "
                "(its ledger has no commit for it) and the query id that would tell whether both are the "
                f"same query is not known here. If this is the same query under a new writer_id, restart it "
                f"once with writer_id={name!r} to finish that batch exactly once, then rename; if that batch "
                f"is abandoned, run `s2-sink ledger reset {name}`"
            )
    if not found:
        return None
    if len(found) > 1:
        raise WriterConflictError(
            f"writer_id {ledger.writer_id!r}: several ledgers wrote this query's batches to {destination} "
            f"({', '.join(repr(o.writer_id) for o, _ in found)}); name the writer explicitly "
            "(writer_id=...) with the one to go on from"
        )
    other, state = found[0]
    return await _move(ledger, other, state)


def _continues(
    state: LedgerState, name: str, query_id: str | None, destination: str | None, predecessor: str | None
) -> bool:
    """Whether the identity `name` wrote the batches this one goes on with."""
    same_dest = state.dest is None or state.dest == destination
    if name == predecessor:
        return same_dest and state.query_id in (None, query_id)
    return query_id is not None and state.query_id == query_id and same_dest


def _in_flight_elsewhere(state: LedgerState, query_id: str | None, destination: str | None) -> bool:
    """A batch in flight under another identity with this destination, whose query cannot be compared."""
    unknown_query = query_id is None or state.query_id is None
    return (
        unknown_query
        and destination is not None
        and state.dest == destination
        and state.kind in ("open", "intent")
    )


async def _move(ledger: Ledger, other: Ledger, state: LedgerState) -> LedgerState:
    """Copy `other`'s state into `ledger` after marking `other` as moved (both conditional appends)."""
    await other.load()
    if other.state.moved_to is None:
        await other.append(replace(other.state, moved_to=ledger.writer_id))
    carried = replace(
        other.state,
        moved_to=None,
        writer=other.state.writer or writer_hash(other.writer_id),
    )
    await ledger.append(carried)
    log.warning(
        "exactly-once: writer %s takes over from writer %s (its ledger: %s of batch %s, epoch %s): "
        "batches it committed are not written again, and a batch it left half-written is recovered",
        ledger.writer_id,
        other.writer_id,
        state.kind,
        state.committed,
        state.epoch,
    )
    return ledger.state


def check_destination(state: LedgerState, writer_id: str, destination: str | None) -> None:
    """Refuse a writer whose destination differs from the one its ledger recorded (WriterConflictError):
    two writers sharing one explicit writer_id would share one ledger and skip each other's batches."""
    if state.moved_to is not None:
        raise WriterConflictError(
            f"writer_id {writer_id!r} was taken over by writer_id {state.moved_to!r}, which goes on with its "
            f"batches: write as {state.moved_to!r}"
        )
    if destination is None or state.dest is None or state.dest == destination:
        return
    raise WriterConflictError(
        f"writer_id {writer_id!r} writes to {state.dest} (its ledger says so), but this writer writes to "
        f"{destination}: two writers cannot share a writer_id. Give each its own writer_id, or none (the "
        "default identity covers the destination)"
    )


async def check_not_lost(basin: S2Basin, writer_id: str) -> None:
    """Refuse an identity whose ledger is empty while its sign-in registers exist (CommitError): its ledger
    was deleted or recreated empty, and with it what it committed, so a batch Spark replays would be written
    again and a half-written one would not be read back (see module docstring)."""
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
