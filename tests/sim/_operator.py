"""An operator between a task retry's barrier and a zombie's next append: ``s2-sink fences clear`` on the
stream (a fence command with an empty token, appended without a token), as our own FencedError message
suggests. The zombie must still not append past its retry's barrier (issue 25 item 4)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from s2_sdk import AppendInput, CommandRecord

from s2_sink._transport import runtime as _runtime
from s2_sink._transport.session_pool import get_pool
from s2_sink.config import S2Config
from s2_sink.errors import StreamResetError
from s2_sink.lite._store import Store
from tests.sim._invariants import GONE, Violation, held_by
from tests.sim._memory_s2 import MemoryService
from tests.sim._scheduler import Op, Scheduler

__all__ = ["check_reset_stop", "spawn_fence_clearer", "spawn_stream_recreator"]

_BARRIER = "~"
"""A generation bumped by a task attempt carries ``~`` and the attempt in its token (fencing.Token)."""


def spawn_fence_clearer(sched: Scheduler, service: MemoryService, cfg: S2Config) -> None:
    """An operator actor that waits for a retry's barrier on some data stream, then clears that fence."""

    def barrier() -> str | None:
        basin = service.store.basins.get(service.basin)
        if basin is None:
            return None
        fenced = [
            s.name
            for s in basin.streams.values()
            if not s.name.startswith("_s2sink/") and _BARRIER in s.fencing_token
        ]
        return min(fenced, default=None)

    def clear() -> None:
        def others_done() -> bool:
            return all(a.state == "done" for a in sched.actors if a.name != "operator")

        sched.wait(Op("wait", detail="a retry's barrier"), lambda: barrier() is not None or others_done())
        name = barrier()
        if name is None:
            return  # the query ended without a task retry
        sched.note(f"operator: s2-sink fences clear {name}")
        stream = get_pool().client(cfg).basin(cfg.basin).stream(name)
        _runtime.run(stream.append(AppendInput(records=[CommandRecord.fence(b"")])))

    sched.spawn("operator", "driver", clear, calm=True)


def spawn_stream_recreator(
    sched: Scheduler, service: MemoryService, committed: Callable[[], int], streams: Sequence[str]
) -> None:
    """An actor that, once batch 0 is committed, deletes the first of `streams` that exists (S2's
    ``delete_on_empty`` on a quiet routed stream, or an operator): the next batch's writer creates it
    anew, empty, below the ledger's end for it (issue 25 item 5)."""

    def delete() -> None:
        def others_done() -> bool:
            return all(a.state == "done" for a in sched.actors if a.name != "recreator")

        sched.wait(Op("wait", detail="batch 0 committed"), lambda: committed() >= 0 or others_done())
        basin = service.store.basins.get(service.basin)
        if committed() < 0 or basin is None:
            return
        name = next((s for s in streams if s in basin.streams), None)
        if name is None:
            return
        sched.note(f"operator: {name} is deleted (and later created again, empty)")
        GONE.setdefault(service.store, {})[name] = held_by(service.store, service.basin, name)
        service.store.delete_stream(service.basin, name)
        del basin.streams[name]  # the deletion completes (lite: after DELETION_DELAY_S)

    sched.spawn("recreator", "driver", delete, calm=True)


def check_reset_stop(error: StreamResetError, store: Store) -> None:
    """A query stopped by `StreamResetError` is an accepted end only for a stream the schedule deleted, and
    only if the error says what to do (the ledger must forget the old end)."""
    named = re.search(r"stream '([^']+)'", str(error))
    stream = named.group(1) if named else None
    if stream not in GONE.get(store, {}):
        raise Violation(f"StreamResetError for a stream nobody deleted ({stream}): {error}")
    if "s2-sink ledger forget" not in str(error):
        raise Violation(f"StreamResetError without the fix: {error}")
