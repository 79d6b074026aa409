"""Read-committed reads: the stream ends that an exactly-once writer's latest commit recorded.

``s2.isolation=read-committed`` is Kafka's ``isolation.level=read_committed`` with the writer's ledger as
the transaction log: every ``commit`` record of micro-batch N holds, per stream, the end of N's records
(an ``open`` record after it keeps those ends), so a reader bounded by them never sees part of a
micro-batch. The readers take the ends before the tails: the ends then never exceed the tails, and
``min(tail, end)`` is the end of a whole committed batch rather than a tail inside the next one.

Each fetch costs one tail check of the ledger while it has not moved; otherwise `Ledger.peek` reads the
last state record and folds the ends from the latest snapshot (at most ``SNAPSHOT_EVERY`` deltas).
"""

from __future__ import annotations

from s2_sink._exactly_once.ledger import Ledger, LedgerState, ledger_stream_name
from s2_sink._read.offsets import Offsets
from s2_sink._read.options import OPT_COMMITTED_BY, OPT_ISOLATION
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.session_pool import get_pool
from s2_sink.config import S2Config
from s2_sink.errors import CommitError, ConfigError, ReadError

__all__ = ["CommittedEnds"]


class CommittedEnds:
    """The committed ends of one writer, fetched on the driver (plain data: pickles with the reader)."""

    def __init__(self, cfg: S2Config, writer_id: str) -> None:
        self._cfg = cfg
        self.writer_id = writer_id
        self._seen: tuple[int, LedgerState] | None = None
        """The ledger's tail and state at the last fetch: reused while the tail stays."""

    def fetch(self) -> Offsets:
        """Per stream, the end recorded by the writer's latest commit (streams it never committed to are
        absent); ConfigError when the writer has no ledger in the basin read."""

        async def peek() -> tuple[int, LedgerState] | None:
            basin = get_pool().client(self._cfg).basin(self._cfg.basin)
            return await Ledger(basin, self.writer_id, cfg=self._cfg).peek(self._seen)

        try:
            found = _runtime.run(peek())
        except CommitError as exc:
            raise ReadError(f"s2 source: option {OPT_COMMITTED_BY}={self.writer_id!r}: {exc}") from exc
        if found is None:
            raise ConfigError(
                f"option {OPT_COMMITTED_BY}={self.writer_id!r}: basin {self._cfg.basin!r} has no ledger "
                f"stream {ledger_stream_name(self.writer_id)!r}, so that writer never wrote exactly-once "
                "here. Name the writer_id of an exactly-once writer of this basin (S2Writer(writer_id=...) "
                "or s2.writer-id; by default the writing query's streaming query id, logged as "
                f"'exactly-once: writer <id> ...'), start that writer first, or read with "
                f"{OPT_ISOLATION}=read-uncommitted"
            )
        self._seen = found
        return dict(found[1].ends)
