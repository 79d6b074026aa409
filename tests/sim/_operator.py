"""An operator between a task retry's barrier and a zombie's next append: ``s2-sink fences clear`` on the
stream (a fence command with an empty token, appended without a token), as our own FencedError message
suggests. The zombie must still not append past its retry's barrier (issue 25 item 4)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from s2_sdk import AppendInput, CommandRecord

from s2_sink._exactly_once.fencing import Token
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config
from s2_sink.errors import StreamResetError
from s2_sink.lite._store import Store
from tests.sim._invariants import GONE, Violation, held_by
from tests.sim._memory_s2 import MemoryService
from tests.sim._scheduler import Op, Scheduler

__all__ = ["check_reset_stop", "spawn_fence_clearer", "spawn_stream_recreator"]

_TASK = re.compile(r"^r\d+\.b\d+\.p(\d+)\.a(\d+)\.t(\d+)")
"""A task actor's name (`_spark.Query._stage`): run, batch, partition, attempt, task id."""


def _barrier_over_a_zombie(sched: Scheduler, token: str) -> bool:
    """Whether `token` is a retry's barrier (a generation named by an attempt after the first) while an
    earlier attempt of its partition still runs: the moment a cleared fence can hand a zombie the stream.
    Every token of ours carries ``~``, and a first write to a routed stream names its task too."""
    parsed = Token.parse(token)
    if parsed is None or parsed.by is None:
        return False
    tasks = [(m, a) for a in sched.actors if (m := _TASK.match(a.name))]
    retry = any(int(m[2]) > 0 and int(m[3]) == parsed.by.task_id for m, _ in tasks)
    earlier_running = any(
        int(m[1]) == parsed.by.partition and int(m[3]) < parsed.by.task_id and a.state != "done"
        for m, a in tasks
    )
    return retry and earlier_running


def spawn_fence_clearer(
    sched: Scheduler, service: MemoryService, cfg: S2Config, *, stall_zombies: bool = False
) -> None:
    """An operator actor that waits for a retry's barrier on some data stream while the attempt it
    supersedes still runs, then clears that fence. With `stall_zombies` (``zombie-takeover``), attempts
    lost to Spark stall (take no step while any other actor can) until the fence is cleared, and then come
    back first: their next append meets the empty token before the live retry takes the stream back."""
    cleared = False
    if stall_zombies:
        sched.defer = lambda actor: actor.lost != cleared

    def barrier() -> str | None:
        basin = service.store.basins.get(service.basin)
        if basin is None:
            return None
        fenced = [
            s.name
            for s in basin.streams.values()
            if not s.name.startswith("_s2sink/") and _barrier_over_a_zombie(sched, s.fencing_token)
        ]
        return min(fenced, default=None)

    def clear() -> None:
        nonlocal cleared
        try:
            _clear()
        finally:
            cleared = True

    def _clear() -> None:
        def others_done() -> bool:
            return all(a.state == "done" for a in sched.actors if a.name != "operator")

        sched.wait(Op("wait", detail="a retry's barrier"), lambda: barrier() is not None or others_done())
        name = barrier()
        if name is None:
            return  # the query ended without a task retry
        sched.note(f"operator: s2-sink fences clear {name}")
        stream = get_pool().client(cfg).basin(cfg.basin).stream(name)
        _runtime.run(stream.append(AppendInput(records=[CommandRecord.fence("")])))

    sched.spawn("operator", "driver", clear, calm=True)


def spawn_stream_recreator(
    sched: Scheduler, service: MemoryService, committed: Callable[[], int], streams: Sequence[str]
) -> None:
    """An actor that, once batch 0 is committed, deletes the first of `streams` that exists (S2's
    ``delete_on_empty`` on a quiet routed stream, or an operator): the next batch's writer creates it
    anew, empty, below the ledger's end for it (issue 25 item 5). The deletion stays pending for some steps
    of the others, as S2 removes a stream in the background: meanwhile the stream answers 409
    ``stream_deletion_pending``, and a session open on it 503."""

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
        deleting = basin.streams[name]
        sched.wait(Op("wait", detail=f"the deletion of {name} completes"), lambda: True)
        if basin.streams.get(name) is deleting:
            del basin.streams[name]  # the deletion completes (lite: after its deletion delay)
            sched.note(f"operator: the deletion of {name} completed")

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
