"""Read-committed reads: the stream ends that an exactly-once writer's latest commit recorded.

The readers take the ends before the tails, so ``min(tail, end)`` is the end of a whole committed batch
rather than a tail inside the next one. A reader follows its writer to a ledger that took it over
(``moved_to``), or from a query id to that query's one ledger. docs/exactly-once.md, *Reading committed
micro-batches*.
"""

from __future__ import annotations

import logging
from typing import Final

from s2_sdk import S2Basin

from s2_sink._exactly_once.ledger import Ledger, LedgerState, current_ledgers_of, ledger_stream_name, peek_all
from s2_sink._read.planning.offsets import Offsets
from s2_sink._read.read_options import OPT_COMMITTED_BY, OPT_ISOLATION
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config
from s2_sink.errors import CommitError, ConfigError, ReadError

__all__ = ["CommittedEnds"]

log = logging.getLogger(__name__)

_MAX_HOPS: Final = 32
"""Take-overs followed in one fetch (a longer chain means a ledger names itself in a loop)."""


class CommittedEnds:
    """The committed ends of one writer, fetched on the driver (plain data: pickles with the reader)."""

    def __init__(self, cfg: S2Config, writer_id: str) -> None:
        self._cfg = cfg
        self.writer_id = writer_id
        """The writer the reader is bound to, as the user named it (``s2.committed-by``)."""
        self.current = writer_id
        """The writer id whose ledger holds its commits now: the same, or where take-overs led."""
        self._seen: tuple[int, LedgerState] | None = None
        """The current ledger's tail and state at the last fetch: reused while the tail stays."""

    def fetch(self) -> Offsets:
        """Per stream, the end of the writer's latest commit (streams it never committed to are absent)."""
        try:
            found = _runtime.run(self._find())
        except CommitError as exc:
            raise ReadError(f"s2 source: option {OPT_COMMITTED_BY}={self.writer_id!r}: {exc}") from exc
        self._seen = found
        return dict(found[1].ends)

    async def _find(self) -> tuple[int, LedgerState]:
        basin = get_pool().client(self._cfg).basin(self._cfg.basin)
        for _ in range(_MAX_HOPS):
            seen = self._seen
            found = await Ledger(basin, self.current, cfg=self._cfg).peek(seen)
            if found is None and self.current == self.writer_id:
                writer_id = await self._of_query(basin)
                self._follow(
                    writer_id, f"{self.writer_id!r} is the streaming query id of writer_id {writer_id!r}"
                )
                continue
            if found is None:
                raise CommitError(f"writer_id {self.current!r}, which took its ledger over, has no ledger")
            moved = found[1].moved_to
            if moved is None:
                return found
            self._follow(moved, f"writer_id {self.current!r} was taken over by writer_id {moved!r}")
        raise CommitError(f"more than {_MAX_HOPS} take-overs from writer_id {self.writer_id!r}: a loop")

    def _follow(self, writer_id: str, why: str) -> None:
        log.warning(
            "read-committed (%s=%s): %s: reading up to its commits", OPT_COMMITTED_BY, self.writer_id, why
        )
        self.current, self._seen = writer_id, None

    async def _of_query(self, basin: S2Basin) -> str:
        """The one ledger holding the batches of the streaming query named ``writer_id``; ConfigError for none
        or several."""
        states = await peek_all(basin, cfg=self._cfg, skip_unreadable=True)
        ids = current_ledgers_of(states, self.writer_id)
        if len(ids) == 1:
            return ids[0]
        if ids:
            raise ConfigError(
                f"option {OPT_COMMITTED_BY}={self.writer_id!r} is the streaming query id of several "
                f"exactly-once writers in basin {self._cfg.basin!r} ({', '.join(repr(i) for i in ids)}): "
                f"name one of them with {OPT_COMMITTED_BY}"
            )
        known = (
            ", ".join(repr(w) for w in list(states)[:10]) + (", ..." if len(states) > 10 else "") or "none"
        )
        raise ConfigError(
            f"option {OPT_COMMITTED_BY}={self.writer_id!r}: basin {self._cfg.basin!r} has no ledger stream "
            f"{ledger_stream_name(self.writer_id)!r} and no writer of a streaming query with that id, so "
            f"that writer never wrote exactly-once here (its exactly-once writers: {known}). Name the "
            "writer_id of an exactly-once writer of this basin (S2Writer(writer_id=...) or s2.writer-id; "
            "by default the writing query's streaming query id), start that writer first, or read with "
            f"{OPT_ISOLATION}=read-uncommitted"
        )
