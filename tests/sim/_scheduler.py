"""The seeded scheduler: simulated actors (driver runs, task attempts) take one S2 step at a time, in an
order and with faults drawn from one seed.

Every actor is a real thread running the real code (Spark calls the writer synchronously from its task
threads; the writer's I/O runs on the process's event loop). Every call into the in-memory S2 is a
scheduling point, and so is an actor waiting for Spark to tell it something (a driver waiting for its
tasks). An actor may be parked at several points at once: the bulk append path runs one session per
stream as its own coroutine next to the task's own flow (they are the actor's *fibers*).

The scheduler takes a step only once the whole process is quiet: no actor thread is running (each is
parked, waiting for its coroutine on the loop, or done) and the event loop has nothing to run but
timeouts (a coroutine sleeping through a back-off counts as running: with nothing else to run, its
timer is fired at once rather than waited for). It then picks one parked fiber with the seeded RNG,
decides the fault of its step, and lets only that one go on. Nothing depends on thread timing: the same
seed gives the same schedule, step for step.

The code under test reaches the loop through ``s2_sink._transport.runtime.run``; while a schedule runs, the
scheduler wraps it to know when an actor's thread only waits for its coroutine (it changes nothing else). It
also stops the retry policy's clock: back-offs take no time here, so no retry loop reaches its delivery
deadline, and when a loop gives up does not depend on how fast the machine runs the schedule. An actor is
identified inside the code it calls (also in the coroutines it starts on the event loop, which inherit the
thread's context) by a context variable.
"""

from __future__ import annotations

import asyncio
import random
import threading
from asyncio import futures
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from s2_sink._transport import retry as _retry
from s2_sink._transport import runtime as _runtime

__all__ = [
    "Actor",
    "FetchFailed",
    "Op",
    "Scheduler",
    "SimCrash",
    "SimStuck",
    "Verdict",
]

T = TypeVar("T")

Verdict = Literal[
    "ok", "refuse", "ambiguous", "crash_before", "crash_after", "fetch_failed", "lost", "reconnect", "drop"
]
"""What happens at a step: it runs; it is refused with nothing applied (a 429); it is applied but the
reply is lost (the caller sees a transport error); the actor's process dies before it, or right after it
was applied; (task appends only) the task fails with a shuffle fetch failure before it, which makes
Spark retry the whole stage; (task steps only) Spark declares the attempt lost (an executor heartbeat
timeout) and retries it, while the attempt goes on as a zombie; (bulk session appends only) it is applied
and its ack carries S2's reconnect advice; (bulk session appends only) the HTTP/2 connection under the
session drops, ending every session on it (`tests.sim._connection.MemoryConnection.drop`)."""

_SLEEP_HORIZON_S = 5.0
"""A coroutine sleeping less than this (a retry back-off) is running; a longer timer is a timeout or the
session pool's reaper, which a schedule never waits for."""


def _stopped_clock() -> float:
    """The retry policy's clock during a schedule: time does not pass (see the module docstring)."""
    return 0.0


class SimCrash(BaseException):
    """The simulated process of the current actor died here (a BaseException: no `except Exception` in
    the code under test may survive it, as no code survives ``os._exit``)."""


class FetchFailed(SimCrash):
    """The task failed reading its shuffle input: Spark retries the stage, not the task."""


class SimStuck(AssertionError):
    """An actor ran for too long without reaching a scheduling point, or no actor could proceed."""


@dataclass(frozen=True, slots=True)
class Op:
    """A scheduling point: what the parked fiber is about to do."""

    kind: str
    """``append`` (unary), ``session`` (an append session's message), ``read``, ``tail``, ``ensure``,
    ``wait`` (a driver waiting for its tasks), ``spark-commit`` (Spark records the batch in its
    checkpoint)."""
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
    state: Literal["running", "done"] = "running"
    dead: bool = False
    """Its process died: every later step raises `SimCrash` without effect."""
    lost: bool = False
    """Spark gave up on it (a task attempt) and launched a retry; it goes on as a zombie."""
    thread_busy: bool = True
    """Its thread runs code (not parked, not waiting for its coroutine on the loop, not done)."""
    op: Op | None = None
    """Its last scheduling point (for reports)."""
    outcome: str = ""
    """How it ended: ``ok``, ``crashed``, ``fetch-failed`` or the error it raised."""
    error: BaseException | None = None
    result: object = None


@dataclass(eq=False)
class _Fiber:
    """A parked point: a coroutine awaiting `fut` on the loop, or a thread waiting on `event`."""

    actor: Actor
    op: Op
    seq: int
    ready: Callable[[], bool] | None = None
    """For a wait: whether it can proceed (checked by the scheduler)."""
    fut: asyncio.Future[Verdict] | None = None
    event: threading.Event | None = None
    verdict: Verdict = "ok"
    owner: object = None
    """What parked it, for `Scheduler.interrupt` (an append session's response)."""


_current: ContextVar[Actor | None] = ContextVar("sim_actor", default=None)
_scheduler: ContextVar[Scheduler | None] = ContextVar("sim_scheduler", default=None)

Policy = Callable[[Actor, Op, random.Random], Verdict]


class Scheduler:
    """Runs actors one step at a time in a seeded order (see module docstring)."""

    def __init__(self, seed: int, *, max_steps: int = 20_000, stall_s: float = 60.0) -> None:
        self.rng = random.Random(seed)
        self.drops = random.Random(f"connection-drops-{seed}")
        """Draws for connection drops (whether one happens, and what it leaves applied): a stream of its
        own, so a schedule without a drop takes the same steps as before drops were simulated."""
        self.policy: Policy = lambda actor, op, rng: "ok"
        """Decides the fault at each step (the query's, set once it exists)."""
        self.observe: Callable[[], None] | None = None
        """Called at every step, the process quiet (an invariant that must hold at every step: it raises
        an AssertionError, which ends the schedule as a failure naming it)."""
        self.defer: Callable[[Actor], bool] | None = None
        """Actors whose steps wait while any other actor can take one (a process stalled, e.g. in a GC
        pause, that goes on later): never a deadlock, a deferred actor steps when nothing else can."""
        self.max_steps = max_steps
        self.stall_s = stall_s
        self.actors: list[Actor] = []
        self.trace: list[str] = []
        self.steps = 0
        self.failure: str | None = None
        """Why the schedule cannot go on (no actor can proceed, too many steps)."""
        self._cv = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._parked: list[_Fiber] = []
        self._seq = 0
        self._probing = False
        self._ended = False
        self._busy_threads = 0
        """How many actor threads run code (see `Actor.thread_busy`)."""
        self._loop = _runtime.get_loop()
        self._original_run: Callable[..., Any] | None = None
        self._original_clock: Callable[[], float] | None = None

    # -- actors ------------------------------------------------------------------------------------------

    def spawn(
        self, name: str, role: Literal["driver", "task"], body: Callable[[], object], *, calm: bool = False
    ) -> Actor:
        """Start `body` as a new actor (registered at once, so the scheduler waits for it)."""
        with self._cv:
            actor = Actor(len(self.actors), name, role, calm)
            self.actors.append(actor)
            self._busy_threads += 1  # its thread starts running
            if self._original_run is None:  # from the first actor until `run` ends
                self._original_run = _runtime.run
                _runtime.run = _tracked_run(self._original_run)
                self._original_clock, _retry._clock = _retry._clock, _stopped_clock

        def main() -> None:
            _current.set(actor)
            _scheduler.set(self)
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
                    self._thread_waits(actor)
                    self._cv.notify_all()
                    self._kick()

        thread = threading.Thread(target=main, name=f"sim-{name}", daemon=True)
        self._threads.append(thread)
        thread.start()
        return actor

    @property
    def over(self) -> bool:
        """Whether the schedule ended (or failed): nothing of it may start again."""
        return self._ended or self.failure is not None

    @staticmethod
    def current() -> Actor | None:
        """The actor running the calling code (None outside the simulation, e.g. the pool's reaper)."""
        return _current.get()

    # -- points ------------------------------------------------------------------------------------------

    async def point(self, op: Op, owner: object = None) -> Verdict:
        """Park the calling coroutine at `op` until scheduled (or interrupted, see `interrupt`); its
        verdict (crash_before raises)."""
        actor = _current.get()
        if actor is None:
            return "ok"
        if actor.dead or not self._owns(actor):
            raise SimCrash
        fut: asyncio.Future[Verdict] = asyncio.get_running_loop().create_future()
        with self._cv:
            fiber = self._park(actor, op, fut=fut, kick=False)
            fiber.owner = owner
            if self.failure is None and not self._ended and not self._busy_threads and self._quiet_now():
                # Only this coroutine runs: the step the probe would take once it parked, taken now (often
                # it is this fiber's, which then goes on without a trip through the loop).
                self._step()
            else:
                self._kick()
        try:
            verdict = fut.result() if fut.done() else await fut
        except BaseException:  # cancelled (an aborted session): the step never happens
            with self._cv:
                if fiber in self._parked:
                    self._parked.remove(fiber)
            raise
        return self._apply_crash(actor, verdict)

    def interrupt(self, owner: object, verdict: Verdict) -> bool:
        """(On the loop.) Release `owner`'s parked point with `verdict` without taking a step: the step
        of another fiber decided its fate (a connection drop ends every session on the connection).
        Whether one was parked."""
        with self._cv:
            fiber = next((f for f in self._parked if f.owner is owner), None)
            if fiber is None:
                return False
            self._parked.remove(fiber)
            self._release(fiber, verdict)
            return True

    def _owns(self, actor: Actor) -> bool:
        """Whether `actor` is one of this schedule's. A thread of an earlier schedule that outlived it (its
        join timed out on a loaded machine) reaches this one through the process-wide session pool: its
        process is gone, so it dies at its next step instead of taking steps in a schedule not its own."""
        return actor.id < len(self.actors) and self.actors[actor.id] is actor

    def _quiet_now(self) -> bool:
        """(Lock held, on the loop.) No thread runs and nothing else is due on the loop."""
        return self._loop_idle() and self._sleeper() is None

    def wait(self, op: Op, ready: Callable[[], bool]) -> Verdict:
        """Park the calling actor's thread until `ready()` holds and the scheduler picks it."""
        actor = _current.get()
        assert actor is not None
        if actor.dead or not self._owns(actor):
            raise SimCrash
        event = threading.Event()
        with self._cv:
            fiber = self._park(actor, op, ready=ready, event=event, thread=True)
        event.wait()
        return self._apply_crash(actor, fiber.verdict)

    def _park(
        self,
        actor: Actor,
        op: Op,
        *,
        ready: Callable[[], bool] | None = None,
        fut: asyncio.Future[Verdict] | None = None,
        event: threading.Event | None = None,
        thread: bool = False,
        kick: bool = True,
    ) -> _Fiber:
        self._seq += 1
        fiber = _Fiber(actor, op, self._seq, ready, fut, event)
        self._parked.append(fiber)
        actor.op = op
        if thread:
            self._thread_waits(actor)
        if kick:
            self._kick()
        return fiber

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

    def _kick(self) -> None:
        """(Lock held.) Something parked or ended: once no actor thread runs, watch the loop go quiet."""
        if self._probing or self.failure is not None or self._ended:
            return
        if self._busy_threads:
            return
        self._probing = True
        if _runtime.in_loop_thread():
            self._loop.call_soon(self._probe)
        else:
            self._loop.call_soon_threadsafe(self._probe)

    def _probe(self) -> None:
        """(On the loop.) Take the next step once the process is quiet; until then, look again."""
        try:
            self._look()
        except Exception as exc:  # noqa: BLE001 - a bug here would stall the schedule silently: end it, saying why
            with self._cv:
                self._fail(f"the scheduler failed: {exc!r}")

    def _look(self) -> None:
        loop = self._loop
        with self._cv:
            if self.failure is not None or self._ended or self._busy_threads:
                self._probing = False  # a thread runs: it kicks again when it parks or waits
                return
            if not self._loop_idle():  # a callback (a woken coroutine) is due
                loop.call_soon(self._probe)
                return
            sleeper = self._sleeper()
            if sleeper is not None:
                # Nothing else can happen while it sleeps (no thread runs, nothing is due): waking it now
                # takes the same schedule without waiting out the back-off in real time.
                wake_up, args = sleeper._callback, sleeper._args  # type: ignore[attr-defined]
                sleeper.cancel()  # (which clears both)
                loop.call_soon(wake_up, *args)
                loop.call_soon(self._probe)
                return
            self._probing = False
            self._step()

    def _loop_idle(self) -> bool:
        """(On the loop.) Nothing is due on the loop but probes (the running callback aside)."""
        # A copy: a garbage collection on this thread may finalize an async generator, which appends
        # its ``aclose()`` to the ready queue (harmless: it takes no step), also during the copy itself,
        # which then fails ("deque mutated during iteration"; seeds 1315 and 7448, once each): copy again.
        while True:
            try:
                due = tuple(self._loop._ready)  # type: ignore[attr-defined]
                break
            except RuntimeError:
                continue
        return all(h._callback == self._probe for h in due)

    def _sleeper(self) -> asyncio.TimerHandle | None:
        """(On the loop.) The timer of the coroutine sleeping through a back-off that wakes up first, if any
        (``asyncio.sleep`` is a timer that sets its future's result)."""
        loop = self._loop
        sleeping = [
            h
            for h in loop._scheduled  # type: ignore[attr-defined]
            if not h.cancelled() and h._callback is futures._set_result_unless_cancelled  # type: ignore[attr-defined]
        ]
        soonest: asyncio.TimerHandle | None = min(sleeping, key=lambda h: h.when(), default=None)
        if soonest is None or soonest.when() - loop.time() >= _SLEEP_HORIZON_S:
            return None
        return soonest

    def _step(self) -> None:
        """(Lock held, on the loop, the process quiet.) Pick a parked fiber and let it go on."""
        dead = [f for f in self._parked if f.actor.dead or f.actor.state == "done"]
        if dead:
            # Points left behind by a process that died (or an actor that ended): they die with it, no step.
            for f in dead:
                self._parked.remove(f)
                self._release(f, "crash_before")
            self._watch()
            return
        if not self._parked:
            if all(a.state == "done" for a in self.actors):
                self._cv.notify_all()
                return
            busy = [f"{a.name} (last at {a.op})" for a in self.actors if a.state != "done"]
            self._fail(f"no actor can proceed and none is parked: {busy}")
            return
        ready = [f for f in self._parked if f.ready is None or f.ready()]
        if not ready:
            self._fail(f"no actor can proceed: {[f'{f.actor.name} at {f.op}' for f in self._parked]}")
            return
        if self.observe is not None:
            try:
                self.observe()
            except AssertionError as exc:
                self._fail(f"at step {self.steps}: {type(exc).__name__}: {exc}")
                return
        self.steps += 1
        if self.steps > self.max_steps:
            self._fail(f"more than {self.max_steps} steps")
            return
        if self.defer is not None:
            ready = [f for f in ready if not self.defer(f.actor)] or ready
        ready.sort(key=lambda f: (f.actor.id, str(f.op), f.seq))
        fiber = ready[self.rng.randrange(len(ready))]
        actor = fiber.actor
        verdict = self.policy(actor, fiber.op, self.rng)
        if verdict == "lost":
            actor.lost = True
        note = "" if verdict == "ok" else f" -> {verdict}"
        self.trace.append(f"{self.steps:4d} {actor.name}: {fiber.op}{note}")
        self._parked.remove(fiber)
        self._release(fiber, verdict)
        self._watch()

    def _watch(self) -> None:
        """(Lock held, on the loop.) Keep watching: what a released fiber does ends in a point, a quiet
        loop or a running thread (which kicks again when it waits)."""
        self._probing = True
        self._loop.call_soon(self._probe)

    def _thread_waits(self, actor: Actor) -> None:
        """(Lock held.) `actor`'s thread stops running code: parked, waiting for its coroutine, or ended."""
        if actor.thread_busy:
            actor.thread_busy = False
            self._busy_threads -= 1

    def _thread_runs(self, actor: Actor) -> None:
        """(Lock held.) `actor`'s thread runs code again."""
        if not actor.thread_busy:
            actor.thread_busy = True
            self._busy_threads += 1

    def _release(self, fiber: _Fiber, verdict: Verdict) -> None:
        if fiber.event is not None:
            self._thread_runs(fiber.actor)
            fiber.verdict = verdict
            fiber.event.set()
            return
        assert fiber.fut is not None
        if not fiber.fut.done():
            fiber.fut.set_result(verdict)

    def _fail(self, why: str) -> None:
        self.failure = why
        self._cv.notify_all()

    def run(self) -> None:
        """Start scheduling (the actors spawned so far) and wait until every actor is done."""
        try:
            with self._cv:
                self._kick()
                quiet = self._cv.wait_for(
                    lambda: self.failure is not None or all(a.state == "done" for a in self.actors),
                    timeout=self.stall_s,
                )
                if self.failure is not None:
                    raise SimStuck(self.failure)
                if not quiet:
                    busy = [
                        f"{a.name} ({'running' if a.thread_busy else 'waiting'}, last at {a.op})"
                        for a in self.actors
                        if a.state != "done"
                    ]
                    parked = [f"{f.actor.name} at {f.op}" for f in self._parked]
                    raise SimStuck(
                        f"the schedule did not end within {self.stall_s:.0f}s: {busy}; parked: {parked}"
                    )
        finally:
            if self._original_run is not None:
                _runtime.run = self._original_run
            if self._original_clock is not None:
                _retry._clock = self._original_clock
            self._end_leftovers()

    def _end_leftovers(self) -> None:
        """Points still parked once every actor ended (or the schedule failed) die with their process."""

        def end() -> None:
            with self._cv:
                self._ended = True
                left, self._parked = self._parked, []
                for f in left:
                    self._release(f, "crash_before")

        self._loop.call_soon_threadsafe(end)

    def note(self, text: str) -> None:
        """Add a line to the trace (what the Spark model decided: a retry, a restart)."""
        self.trace.append(f"     {text}")

    def join_threads(self, timeout: float = 10.0) -> None:
        for t in self._threads:
            t.join(timeout)


def _tracked_run(run: Callable[..., Any]) -> Callable[..., Any]:
    """``s2_sink._transport.runtime.run`` that tells the scheduler when an actor's thread only waits for its
    coroutine: from the moment the coroutine starts on the loop until it ends (both seen on the loop)."""

    def tracked(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        actor, sched = _current.get(), _scheduler.get()
        if actor is None or sched is None:
            return run(coro, timeout)  # type: ignore[no-any-return]

        async def waited_for() -> T:
            with sched._cv:
                sched._thread_waits(actor)
                sched._kick()
            try:
                return await coro
            finally:
                with sched._cv:
                    sched._thread_runs(actor)

        return run(waited_for(), timeout)  # type: ignore[no-any-return]

    return tracked
