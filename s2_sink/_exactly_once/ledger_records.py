"""The ledger's record format: state records with stream ends as deltas and snapshots (version 1, 0.1.0's,
still loads: docs/exactly-once.md, *Ledger*), and the check that a committed end is still in its stream."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

import orjson

from s2_sink._exactly_once.shape import WriteShape
from s2_sink.errors import CommitError, StreamResetError

__all__ = [
    "PIECE_BYTES",
    "SNAPSHOT_EVERY",
    "EndsFold",
    "LedgerState",
    "check_not_reset",
    "encode_state",
    "parse_record",
    "record_base",
    "state_of",
    "stream_reset",
]

VERSION: Final = 3
_VERSIONS: Final = (1, 3)  # 2 was never released
SNAPSHOT_EVERY: Final = 64  # commits between snapshots: loading reads one snapshot and fewer deltas
PIECE_BYTES: Final = 64 * 1024  # JSON bytes of stream ends per record, far below S2's 1 MiB


@dataclass(frozen=True, slots=True)
class LedgerState:
    """The state after the ledger's last state record (or the empty state of a new writer)."""

    kind: Literal["none", "open", "intent", "commit"] = "none"
    epoch: int = 0
    run: str = ""
    query_id: str | None = None
    committed: int = -1
    ends: dict[str, int] = field(default_factory=dict)
    scope: Literal["run", "batch"] = "run"
    base: int = field(default=0, compare=False)  # where the latest snapshot starts (loading folds from it)
    since: int = field(default=0, compare=False)  # commits since that snapshot
    intent: int | None = None  # the micro-batch an ``intent`` announced
    announces: bool = False  # every batch is announced by an ``intent`` before it is written (version 3)
    # The configurations of the epochs that may have written the batch after `committed`, the current last.
    shapes: tuple[WriteShape, ...] = ()
    # The hash in tokens and tags of a ledger taken over: the predecessor's, so its writes read back as ours.
    writer: str | None = None
    moved_to: str | None = None  # the writer id that took this ledger over: this identity writes no more

    @property
    def may_have_written_next(self) -> bool:
        """Whether this state's epoch may have written part of the batch after `committed`: an ``open`` or
        ``intent`` may have; after a ``commit``, only a version 1 run-scoped epoch (it announced nothing)."""
        if self.kind in ("open", "intent"):
            return True
        return self.kind == "commit" and self.scope == "run" and not self.announces


def _header(state: LedgerState) -> dict[str, Any]:
    return {
        "v": VERSION,
        "kind": state.kind,
        "epoch": state.epoch,
        "run": state.run,
        "query_id": state.query_id,
        "committed": state.committed,
        "scope": state.scope,
        **({"batch": state.intent} if state.kind == "intent" else {}),
        **({"announces": True} if state.announces else {}),
        **{k: v for k, v in (("writer", state.writer), ("moved_to", state.moved_to)) if v},
        **({"shapes": [s.as_doc() for s in state.shapes]} if state.shapes else {}),
    }


def _pieces(ends: dict[str, int]) -> list[dict[str, int]]:
    """`ends` in maps of at most `PIECE_BYTES` of JSON (at least one, maybe empty)."""
    out: list[dict[str, int]] = [{}]
    size = 2
    for stream, end in ends.items():
        entry = len(orjson.dumps(stream)) + len(str(end)) + 2
        if size + entry > PIECE_BYTES and out[-1]:
            out.append({})
            size = 2
        out[-1][stream] = end
        size += entry
    return out


def encode_state(prev: LedgerState, state: LedgerState, at: int) -> tuple[list[bytes], LedgerState, bool]:
    """The bodies appending `state` on top of `prev` at seq_num `at`, `state` with its ``base`` and
    ``since``, and whether it is a snapshot (the ledger may then be trimmed to ``base``)."""
    snapshot = state.kind == "commit" and prev.since + 1 >= SNAPSHOT_EVERY
    if snapshot:
        ends, base, since = state.ends, at, 0
    else:
        moved = {s: e for s, e in state.ends.items() if prev.ends.get(s) != e}
        ends, base, since = moved, prev.base, prev.since + (state.kind == "commit")
    pieces = _pieces(ends)
    bodies = [orjson.dumps({"v": VERSION, "kind": "ends", "ends": p}) for p in pieces[:-1]]
    last = {**_header(state), "base": base, "full": snapshot, "parts": len(pieces) - 1, "ends": pieces[-1]}
    bodies.append(orjson.dumps(last))
    return bodies, replace(state, base=base, since=since), snapshot


def parse_record(body: bytes, where: str) -> dict[str, Any]:
    """A ledger record's document, checked enough to fold; CommitError otherwise."""
    try:
        doc = orjson.loads(body)
        kinds = ("open", "commit") if doc.get("v") == 1 else ("open", "intent", "commit", "ends")
        if doc.get("v") not in _VERSIONS or doc.get("kind") not in kinds:
            raise ValueError(f"unknown ledger record version/kind: {doc.get('v')!r}/{doc.get('kind')!r}")
        if not isinstance(doc.get("ends"), dict):
            raise ValueError("no 'ends' map")
        return dict(doc)
    except (ValueError, TypeError, AttributeError) as exc:
        raise CommitError(f"ledger {where!r} has an unreadable record: {exc}") from exc


def state_of(doc: dict[str, Any], ends: dict[str, int], base: int, since: int, where: str) -> LedgerState:
    """The state of state record `doc`, with the ends folded up to it."""
    try:
        return LedgerState(
            kind=doc["kind"],
            epoch=int(doc["epoch"]),
            run=str(doc["run"]),
            query_id=doc.get("query_id"),
            committed=int(doc["committed"]),
            ends=ends,
            scope="batch" if doc.get("scope") == "batch" else "run",
            base=base,
            since=since,
            intent=int(doc["batch"]) if doc["kind"] == "intent" else None,
            announces=bool(doc.get("announces", False)),
            shapes=tuple(WriteShape.of_doc(d) for d in doc.get("shapes", ())),
            writer=doc.get("writer"),
            moved_to=doc.get("moved_to"),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CommitError(f"ledger {where!r} has an unreadable state record: {exc}") from exc


def record_base(doc: dict[str, Any], seq_num: int) -> int:
    """Where loading folds from for the state record `doc` at `seq_num` (a version 1 record: itself)."""
    return seq_num if doc.get("v") == 1 else int(doc["base"])


class EndsFold:
    """Folds the records from a ``base`` on into the stream ends: snapshot, then deltas (max per stream)."""

    def __init__(self) -> None:
        self.ends: dict[str, int] = {}
        self.since = 0
        self._pending: list[dict[str, Any]] = []

    def add(self, doc: dict[str, Any]) -> None:
        if doc["kind"] == "ends":
            self._pending.append(doc["ends"])
            return
        parts = int(doc.get("parts", 0))
        claimed = self._pending[len(self._pending) - parts :] if parts else []
        if len(claimed) != parts:
            raise CommitError(f"ledger state record claims {parts} ends records, found {len(claimed)}")
        for piece in [*claimed, doc["ends"]]:
            for stream, end in piece.items():
                self.ends[str(stream)] = max(int(end), self.ends.get(str(stream), 0))
        self._pending.clear()
        if doc.get("v") == 1 or doc.get("full"):
            self.since = 0
        elif doc["kind"] == "commit":
            self.since += 1


def check_not_reset(committed: Mapping[str, int], reported: Mapping[str, int], writer_id: str) -> None:
    """Before a commit: acks ending below the ledger's end are a stream recreated under the batch
    (`StreamResetError`): recording it would put its records behind every reader's committed end."""
    for stream, end in reported.items():
        if end < committed.get(stream, 0):
            raise stream_reset(stream, committed[stream], end, writer_id)


def stream_reset(stream: str, end: int, tail: int, writer_id: str) -> StreamResetError:
    return StreamResetError(
        f"exactly-once: stream {stream!r} ends at {tail}, below the end {end} this writer's ledger committed "
        "for it: the stream was deleted and recreated (S2's delete_on_empty after retention, or by hand), "
        "and the records committed before that are gone. The writer cannot tell where the micro-batch's "
        "records start in the new stream, so it stops before writing to it (nothing was written there). "
        "To go on with the new stream, stop the query, make the ledger forget the old end with "
        f"`s2-sink ledger forget {writer_id} {stream}`, and restart: the writer then reads the new stream "
        "from its start"
    )
