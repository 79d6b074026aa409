"""The exactly-once writers of a basin, found through their ledger streams. A fencing token names its writer
by an 8-hex-digit hash of the writer id only (tokens are at most 36 bytes); hashing each ledger's writer id
gives the id back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from s2_sdk import S2Basin, S2Error, S2ServerError

from s2_sink._exactly_once.fencing import Token, writer_hash
from s2_sink._exactly_once.ledger import LEDGER_PREFIX, Ledger, LedgerState
from s2_sink._transport.explain import is_stream_deleting
from s2_sink.cli._command import PATIENCE
from s2_sink.errors import CommitError

__all__ = ["LedgerSummary", "describe_token", "ledger_summaries", "writer_ids", "writers_by_hash"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LedgerSummary:
    """One writer's ledger: its last state (None, and ``error``, when unreadable), tail and last record's
    time."""

    writer_id: str
    stream: str
    state: LedgerState | None
    tail: int
    timestamp: int
    error: str | None = None

    def as_doc(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "writer_id": self.writer_id,
            "writer_hash": writer_hash(self.writer_id),
            "stream": self.stream,
            "tail": self.tail,
            "timestamp": self.timestamp,
        }
        if self.state is None:
            return {**doc, "error": self.error}
        st = self.state
        return {
            **doc,
            "kind": st.kind,
            "epoch": st.epoch,
            "committed": st.committed,
            "scope": st.scope,
            "query_id": st.query_id,
        }


async def writer_ids(basin: S2Basin) -> list[str]:
    return [info.name[len(LEDGER_PREFIX) :] async for info in basin.list_all_streams(prefix=LEDGER_PREFIX)]


async def writers_by_hash(basin: S2Basin) -> dict[str, list[str]]:
    """Writer hash -> the writer ids with a ledger that have it. Best effort: when the ledgers cannot be
    listed, tokens are shown by their hash."""
    found: dict[str, list[str]] = {}
    try:
        ids = await writer_ids(basin)
    except S2Error as exc:
        log.debug("cannot list the ledgers to name fencing tokens' writers: %s", exc)
        return found
    for writer_id in ids:
        found.setdefault(writer_hash(writer_id), []).append(writer_id)
    return found


async def ledger_summaries(basin: S2Basin) -> list[LedgerSummary]:
    """Every ledger of the basin with its last state; one that cannot be decoded is listed with why."""
    out: list[LedgerSummary] = []
    for writer_id in await writer_ids(basin):
        ledger = Ledger(basin, writer_id, patience=PATIENCE)
        try:
            position = await basin.stream(ledger.name).check_tail()
        except S2ServerError as exc:
            if exc.status_code == 404 or is_stream_deleting(exc):
                continue  # deleted between the listing and now
            raise
        try:
            peeked = await ledger.peek()
        except CommitError as exc:
            at = position.seq_num, position.timestamp
            out.append(LedgerSummary(writer_id, ledger.name, None, *at, error=str(exc)))
            continue
        if peeked is None:  # deleted between the listing and now
            continue
        tail, state = peeked
        out.append(LedgerSummary(writer_id, ledger.name, state, tail, position.timestamp))
    return out


def describe_token(token: str, writers: dict[str, list[str]]) -> str:
    """Who a fencing token belongs to, in words."""
    ours = Token.parse(token)
    if ours is None:
        return f"{token!r} (not an s2_sink token)"
    ids = writers.get(ours.writer, [])
    if len(ids) == 1:
        who = f"exactly-once writer {ids[0]!r} (hash {ours.writer})"
    elif ids:
        who = f"exactly-once writer {' or '.join(map(repr, ids))} (hash {ours.writer})"
    else:
        who = f"exactly-once writer with hash {ours.writer}, whose writer id has no ledger in this basin"
    return f"{token!r} ({who}, epoch {ours.epoch}, generation {ours.gen})"
