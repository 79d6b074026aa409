"""The last commit's stream ends as a task sees them: a few inline, the rest looked up in the ledger.

Only a task off the happy path needs a stream's end, so a plan carries the ledger position of the state
record instead of the whole map; a process folds it once (`lookup`)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from s2_sink._exactly_once.ledger import Ledger, LedgerState
from s2_sink._transport.retry import Patience, patiently
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config
from s2_sink.errors import FencedError

__all__ = ["EndsRef", "lookup"]

_INLINE_MAX: Final = 32  # ends inline in the plan (a lookup costs more than they do)
_KEEP: Final = 2  # folded positions a process keeps: this micro-batch's and the one before


@dataclass(frozen=True, slots=True)
class EndsRef:
    """Per stream, a position before every record of this micro-batch (the last commit's ends)."""

    writer_id: str
    inline: Mapping[str, int] = field(default_factory=dict)
    state_at: int | None = None  # the state record the other ends fold at; None: all are inline
    # The run and epoch it names: a ledger deleted and written anew numbers its records from 0 again.
    state_run: str = ""
    state_epoch: int = 0

    @classmethod
    def of(
        cls,
        writer_id: str,
        state: LedgerState,
        *,
        state_at: int | None,
        keep: Iterable[str] = (),
    ) -> EndsRef:
        """The ends of `state` (at `state_at`): all inline if few, else `keep`'s and the rest by reference."""
        ends = state.ends
        if state_at is None or len(ends) <= _INLINE_MAX:
            return cls(writer_id, dict(ends))
        inline = {s: ends[s] for s in keep if s in ends}
        return cls(writer_id, inline, state_at, state.run, state.epoch)


_folds: OrderedDict[tuple[str, str, int, str, int], asyncio.Future[dict[str, int]]] = OrderedDict()


async def lookup(cfg: S2Config, ref: EndsRef, stream: str) -> int | None:
    """The committed end of `stream`, or None if the writer never committed to it."""
    if stream in ref.inline or ref.state_at is None:
        return ref.inline.get(stream)
    key = (cfg.basin, ref.writer_id, ref.state_at, ref.state_run, ref.state_epoch)
    fold = _folds.get(key)
    if fold is None or (fold.done() and fold.exception() is not None):
        fold = asyncio.ensure_future(_fold(cfg, ref))
        _folds[key] = fold  # concurrent tasks of this process wait on the same fold
        while len(_folds) > _KEEP:
            _folds.popitem(last=False)
    return (await asyncio.shield(fold)).get(stream)


async def _fold(cfg: S2Config, ref: EndsRef) -> dict[str, int]:
    assert ref.state_at is not None
    at = ref.state_at
    ledger = Ledger(get_pool().client(cfg).basin(cfg.basin), ref.writer_id, cfg=cfg)

    planned = (ref.state_run, ref.state_epoch)

    async def fold() -> LedgerState | None:
        async for _, doc in ledger.records(at, at + 1):
            # Another ledger's record (this one was deleted and written anew) is not the one planned from.
            if doc["kind"] != "ends" and (str(doc["run"]), int(doc["epoch"])) == planned:
                return await ledger.state_at_record(at, doc)
        return None

    # Reads may be repeated: a transient failure is waited out, as by every read of the sink.
    state = await patiently(Patience.of(cfg), f"reading the exactly-once ledger {ledger.name!r}", fold)
    if state is None:
        raise FencedError(
            f"exactly-once: the ledger {ledger.name!r} no longer has the state record at {at} this "
            "micro-batch was planned from (a later commit trimmed it): the query has moved past this "
            "micro-batch, so this is a late task attempt and it stops without writing"
        )
    return state.ends
