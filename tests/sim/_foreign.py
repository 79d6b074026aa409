"""Another exactly-once identity on a target stream: its fencing token put on a stream the query writes to (a
take-over by another query's writer, or any other identity), with the schedule's query running. The query's
writer must write each row once (it takes the stream back only where it never committed a write to it) or
stop with a FencedError or WriterConflictError that names the fix, never lose or duplicate a row silently."""

from __future__ import annotations

from collections.abc import Callable

from s2_sdk import AppendInput, CommandRecord

from s2_sink._exactly_once.fencing import Token, writer_hash
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config
from tests.sim._memory_s2 import MemoryService
from tests.sim._scheduler import Op, Scheduler

__all__ = ["FOREIGN_TOKEN", "spawn_foreign_fencer"]

FOREIGN_TOKEN = str(Token(epoch=1, gen=0, writer=writer_hash("query-elsewhere")))
"""The token of the other identity (its first run)."""


def spawn_foreign_fencer(
    sched: Scheduler, service: MemoryService, cfg: S2Config, committed: Callable[[], int], after_commit: bool
) -> None:
    """An actor that fences the first data stream holding records with `FOREIGN_TOKEN`: as soon as one has
    a record (`after_commit` False: most often before the query committed a write to it), or once the
    query's first micro-batch is committed (True)."""

    def target() -> str | None:
        basin = service.store.basins.get(service.basin)
        if basin is None or (after_commit and committed() < 0):
            return None
        written = [
            s.name
            for s in basin.streams.values()
            if not s.name.startswith("_s2sink/") and s.tail()[0] > 0 and s.deleted_at is None
        ]
        return min(written, default=None)

    def fence() -> None:
        def others_done() -> bool:
            return all(a.state == "done" for a in sched.actors if a.name != "foreign")

        sched.wait(Op("wait", detail="a written stream"), lambda: target() is not None or others_done())
        name = target()
        if name is None:
            return
        sched.note(f"foreign: another writer fences {name} with {FOREIGN_TOKEN}")
        stream = get_pool().client(cfg).basin(cfg.basin).stream(name)
        _runtime.run(stream.append(AppendInput(records=[CommandRecord.fence(FOREIGN_TOKEN)])))

    sched.spawn("foreign", "driver", fence, calm=True)
