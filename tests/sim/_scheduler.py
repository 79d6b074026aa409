"""The seeded scheduler: simulated actors (driver runs, task attempts) run one at a time, in an order and
with faults drawn from one seed.

Every actor is a real thread running the real code (Spark calls the writer synchronously from its task
threads; the writer's I/O runs on the process's event loop). Every call into the in-memory S2 is a
scheduling point: the calling coroutine parks there, and so does an actor waiting for Spark to tell it
something (a driver waiting for its tasks). The scheduler waits until *every* live actor is parked, then
picks one with the seeded RNG, decides the fault of its pending step, and lets only that one go on. So
exactly one actor runs between two points and nothing depends on thread timing: the same seed gives the
same schedule, step for step.

An actor is identified inside the code it calls (also in the coroutines it starts on the event loop,
which inherit the thread's context) by a context variable.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "Actor",
    "FetchFailed",
    "Op",
    "Scheduler",
    "SimCrash",
    "SimStuck",
    "Verdict",
]

Verdict = Literal["ok", "refuse", "ambiguous", "crash_before", "crash_after", "fetch_failed", "lost"]
"""What happens at a step: it runs; it is refused with nothing applied (a 429); it is applied but the
reply is lost (the caller sees a transport error); the actor's process dies before it, or right after it
was applied; (task appends only) the task fails with a shuffle fetch failure before it, which makes
Spark retry the whole stage; (task steps only) Spark declares the attempt lost (an executor heartbeat
timeout) and retries it, while the attempt goes on as a zombie."""


class SimCrash(BaseException):
    """The simulated process of the current actor died here (a BaseException: no `except Exception` in
    the code under test may survive it, as no code survives ``os._exit``)."""


class FetchFailed(SimCrash):
    """The task failed reading its shuffle input: Spark retries the stage, not the task."""


class SimStuck(AssertionError):
    """An actor ran for too long without reaching a scheduling point, or no actor could proceed."""


@dataclass(frozen=True, slots=True)
class Op:
    """A scheduling point: what the parked actor is about to do."""

    kind: str
    """``append`` (unary), ``session`` (append session), ``read``, ``tail``, ``ensure``, ``wait`` (a
    driver waiting for its tasks), ``spark-commit`` (Spark records the batch in its checkpoint)."""
    target: str = ""
    detail: str = ""

    def __str__(self) -> str:
        return " ".join(x for x in (self.kind, self.target, self.detail) if x)


@dataclass(eq=False)
class Actor:
    """One simulated thread of control: a driver run or a task attempt."""

    id: int
    name: str
    role: Literal["driver", "task"]
    calm: bool = False
    """No faults are injected into its steps (the last run of a schedule, which must complete)."""
    state: Literal["running", "parked", "done"] = "running"
    dead: bool = False
    """Its process died: every later step raises `SimCrash` without effect."""
    lost: bool = False
    """Spark gave up on it (a task attempt) and launched a retry; it goes on as a zombie."""
    op: Op | None = None
    ready: Callable[[], bool] | None = None
    """For a wait: whether it can proceed (checked by the scheduler)."""
    outcome: str = ""
    """How it ended: ``ok``, ``crashed``, ``fetch-failed`` or the error it raised."""
    error: BaseException | None = None
    result: object = None
    _fut: asyncio.Future[Verdict] | None = field(default=None, repr=False)
    _loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False)
    _event: threading.Event | None = field(default=None, repr=False)
    _verdict: Verdict = "ok"


_current: ContextVar[Actor | None] = ContextVar("sim_actor", default=None)

Policy = Callable[[Actor, Op, random.Random], Verdict]


class Scheduler:
    """Runs actors one step at a time in a seeded order (see module docstring)."""

    def __init__(self, seed: int, *, max_steps: int = 20_000, stall_s: float = 60.0) -> None:
        self.rng = random.Random(seed)
        self.policy: Policy = lambda actor, op, rng: "ok"
        """Decides the fault at each step (the query's, set once it exists)."""
        self.max_steps = max_steps
        self.stall_s = stall_s
        self.actors: list[Actor] = []
        self.trace: list[str] = []
        self.steps = 0
        self.failure: str | None = None
        """Why the schedule cannot go on (no actor can proceed, too many steps)."""
        self._cv = threading.Condition()
        self._threads: list[threading.Thread] = []

    # -- actors ------------------------------------------------------------------------------------------

    def spawn(
        self, name: str, role: Literal["driver", "task"], body: Callable[[], object], *, calm: bool = False
    ) -> Actor:
        """Start `body` as a new actor (registered at once, so the scheduler waits for it)."""
        with self._cv:
            actor = Actor(len(self.actors), name, role, calm)
            self.actors.append(actor)

        def main() -> None:
            _current.set(actor)
            try:
                actor.result = body()
                actor.outcome = "ok"
            except FetchFailed:
                actor.outcome = "fetch-failed"
            except SimCrash:
                actor.outcome = "crashed"
            except BaseException as exc:  # noqa: BLE001 - the real code's error ends the actor; the model reads it
                actor.error = exc
                actor.outcome = f"{type(exc).__name__}: {exc}"
            finally:
                with self._cv:
                    actor.state = "done"
                    self._schedule(None)

        thread = threading.Thread(target=main, name=f"sim-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return actor

    @staticmethod
    def current() -> Actor | None:
        """The actor running the calling code (None outside the simulation, e.g. the pool's reaper)."""
        return _current.get()

    # -- points ------------------------------------------------------------------------------------------

    async def point(self, op: Op) -> Verdict:
        """Park the calling actor's coroutine at `op` until scheduled; its verdict (crash_before raises)."""
        actor = _current.get()
        if actor is None:
            return "ok"
        if actor.dead:
            raise SimCrash
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Verdict] = loop.create_future()
        with self._cv:
            actor.op, actor.ready, actor._fut, actor._loop = op, None, fut, loop
            actor.state = "parked"
            mine = self._schedule(actor)
        verdict = mine if mine is not None else await fut
        return self._apply_crash(actor, verdict)

    def wait(self, op: Op, ready: Callable[[], bool]) -> Verdict:
        """Park the calling actor's thread until `ready()` holds and the scheduler picks it."""
        actor = _current.get()
        assert actor is not None
        if actor.dead:
            raise SimCrash
        event = threading.Event()
        with self._cv:
            actor.op, actor.ready, actor._event = op, ready, event
            actor.state = "parked"
            mine = self._schedule(actor)
        if mine is None:
            event.wait()
            mine = actor._verdict
        return self._apply_crash(actor, mine)

    @staticmethod
    def _apply_crash(actor: Actor, verdict: Verdict) -> Verdict:
        if verdict == "crash_before":
            actor.dead = True
            raise SimCrash
        if verdict == "fetch_failed":
            actor.dead = True
            raise FetchFailed
        if verdict == "lost":
            return "ok"
        return verdict

    @staticmethod
    def crash_now() -> None:
        """The current actor's process dies now (after a step was applied)."""
        actor = _current.get()
        assert actor is not None
        actor.dead = True
        raise SimCrash

    # -- the loop ----------------------------------------------------------------------------------------

    def _schedule(self, caller: Actor | None) -> Verdict | None:
        """Called with the lock held whenever an actor parks or ends: once every actor is parked or done,
        pick the next one and let it go. Returns the verdict if the pick is `caller` itself (it just goes
        on: no thread hand-off), else None. The choice is made by whichever thread made the system quiet,
        which changes nothing about *what* is chosen."""
        if self.failure is not None or any(a.state == "running" for a in self.actors):
            return None
        parked = [a for a in self.actors if a.state == "parked"]
        if not parked:
            self._cv.notify_all()  # every actor is done
            return None
        ready = [a for a in parked if a.ready is None or a.ready()]
        if not ready:
            self._fail(f"no actor can proceed: {[f'{a.name} at {a.op}' for a in parked]}")
            return None
        self.steps += 1
        if self.steps > self.max_steps:
            self._fail(f"more than {self.max_steps} steps")
            return None
        actor = ready[self.rng.randrange(len(ready))]
        assert actor.op is not None
        verdict = self.policy(actor, actor.op, self.rng)
        if verdict == "lost":
            actor.lost = True
        note = "" if verdict == "ok" else f" -> {verdict}"
        self.trace.append(f"{self.steps:4d} {actor.name}: {actor.op}{note}")
        actor.state = "running"
        if actor is caller:
            actor._event = actor._fut = actor._loop = None
            return verdict
        self._release(actor, verdict)
        return None

    def _fail(self, why: str) -> None:
        self.failure = why
        self._cv.notify_all()

    def run(self) -> None:
        """Start scheduling (the actors spawned so far) and wait until every actor is done."""
        with self._cv:
            self._schedule(None)
            quiet = self._cv.wait_for(
                lambda: self.failure is not None or all(a.state == "done" for a in self.actors),
                timeout=self.stall_s,
            )
            if self.failure is not None:
                raise SimStuck(self.failure)
            if not quiet:
                busy = [f"{a.name} ({a.state} at {a.op})" for a in self.actors if a.state != "done"]
                raise SimStuck(f"the schedule did not end within {self.stall_s:.0f}s: {busy}")

    @staticmethod
    def _release(actor: Actor, verdict: Verdict) -> None:
        if actor._event is not None:
            event, actor._event = actor._event, None
            actor._verdict = verdict
            event.set()
            return
        fut, loop = actor._fut, actor._loop
        assert fut is not None
        assert loop is not None
        actor._fut = actor._loop = None
        loop.call_soon_threadsafe(fut.set_result, verdict)

    def note(self, text: str) -> None:
        """Add a line to the trace (what the Spark model decided: a retry, a restart)."""
        self.trace.append(f"     {text}")

    def join_threads(self, timeout: float = 10.0) -> None:
        for t in self._threads:
            t.join(timeout)
