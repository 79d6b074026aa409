"""How users wire and start writers, beyond one writer per query: the profiles of issue 32.

- ``two-drivers``: the query's first run, under ``writer_id="v1"``, dies with a batch in flight (written, its
  commit not appended); then two drivers of the query start together under new ids, ``v2-a`` and ``v2-b`` (a
  job started twice, each run renaming its writer), each in its own start. Both look for the ledger they go on
  from; exactly one takes ``v1`` over. The other stops — refused naming both (its look came first, the other's
  take-over landed before its own), or, starting after that take-over, it takes the winner's ledger over in
  turn and the winner stops (its next ledger append or its tasks' appends are refused) — without writing a
  record twice. In three schedules in four the first driver stalls (a GC pause) once it found ``v1``
  unclaimed and is about to take it over, until the other's ``moved_to`` landed there; every schedule has at
  least two batches.
- ``named-writers``: ``several-writers`` whose second writer, to `MIRROR_STREAM`, has no ``writer_id``: the
  query's first batch is committed by the first writer and the second is refused before writing (a
  ``ConfigError`` naming the fix, a ``writer_id`` for each). The user names both (``main-writer`` and
  `MIRROR_WRITER`) and restarts from the checkpoint; in three schedules in four the function now calls the
  mirror writer first, which meets the query id's ledger, with another routing, committing the batch Spark
  replays: refused naming both fixes, of which the user takes "call that writer first". Every row once in
  both destinations.
- ``unreadable-run-id``: ``several-writers`` whose second call is the same object, or another object with the
  same destination, where Spark's run id cannot be read: every schedule must end refused (a second call of one
  identity in a micro-batch, told apart from a restart in the same process by nothing, is refused, never
  skipped; its refusal also names a restart in a new process, which restarts of the schedule take).
"""

from __future__ import annotations

import random
from dataclasses import replace
from typing import Any

from s2_sink._exactly_once.ledger import ledger_stream_name
from s2_sink.errors import ConfigError, FencedError, WriterConflictError
from s2_sink.writer import S2Writer
from tests.sim._read_committed import moved_to
from tests.sim._refusals import QueryFailed
from tests.sim._scenario import Profile, Scenario

__all__ = ["RACERS", "WiringFront", "draw_wiring"]

RACERS = ("v2-a", "v2-b")
MAIN_WRITER = "main-writer"


def draw_wiring(seed: int, profile: Profile) -> Scenario:
    base = Scenario.draw(seed)
    rng = random.Random(f"{profile}-{seed}")
    if profile == "two-drivers":
        batches = base.batches * 2 if len(base.batches) < 2 else base.batches
        stall = rng.random() < 0.75
        return replace(
            base,
            profile=profile,
            front="writer",
            batches=batches,
            run_id_known=True,
            max_restarts=1,
            racer_stalls=stall,
        )
    if profile == "named-writers":
        second_first = rng.random() < 0.75
        return replace(
            base,
            profile=profile,
            front="writer",
            second="unnamed mirror",
            second_first=second_first,
            run_id_known=True,
        )
    second = "same object" if rng.random() < 0.5 else "same destination"
    return replace(base, profile="unreadable-run-id", front="writer", second=second, run_id_known=False)


class WiringFront:
    """The driver side of these profiles in `tests.sim._spark.Query`."""

    sc: Scenario
    sched: Any
    service: Any
    runs: int
    writer_name: str | None
    finished: bool
    # and, from Query and WriterFront: _note, _new_process, _writer_named, _writer_run

    def _setup_wirings(self, scenario: Scenario) -> None:
        self.raced = False
        self.named = False
        self.second_first = False
        """``named-writers``: the function calls the mirror writer first (once both are named)."""
        if scenario.profile == "two-drivers":
            self.writer_name = "v1"

    def _race(self) -> bool:
        """``two-drivers``: instead of the first restart, two drivers of the query start together under new
        writer ids (in one simulated process: they share its pool). Whether it did."""
        if self.sc.profile != "two-drivers" or self.raced:
            return False
        self.raced = True
        self._new_process()
        if self.sc.racer_stalls:
            self._stall_first_racer()
        for name in RACERS:
            run = self.runs
            self.runs += 1
            self._note(f"driver run {run} starts together with another, as S2Writer(writer_id={name!r})")
            writer = self._writer_named(name)
            self.sched.spawn(f"driver{run}", "driver", lambda r=run, w=writer: self._racer(r, w), calm=True)
        return True

    def _stall_first_racer(self) -> None:
        """The first racer stalls (a GC pause) once it found ``v1`` unclaimed and is about to read its
        ledger again to take it over, until the other racer's ``moved_to`` landed there: the interleaving
        only an exclusive take-over survives."""
        first = f"driver{self.runs}"
        store, basin = self.service.store, self.service.basin
        ledger = ledger_stream_name("v1")

        def defer(actor: Any) -> bool:
            about_to_take = actor.op is not None and (actor.op.kind, actor.op.target) == ("ensure", ledger)
            return actor.name == first and about_to_take and moved_to(store, basin, ledger) is None

        self.sched.defer = defer

    def _racer(self, run: int, writer: S2Writer) -> None:
        try:
            self._writer_run(run, True, own=writer)
            self.finished = True
        except (WriterConflictError, FencedError, QueryFailed) as exc:
            # The driver that lost the race stops; the other must finish (or the query never completes).
            self._note(f"driver run {run} stops: {type(exc).__name__}: {str(exc)[:200]}")

    def _follow_wiring_fix(self, exc: BaseException) -> bool:
        """``named-writers``: the refusal of the second writer without a ``writer_id`` is followed by naming
        both; the refusal of the mirror writer called first by calling it second. Whether it was such."""
        if self.sc.profile != "named-writers":
            return False
        text = str(exc)
        if isinstance(exc, ConfigError) and not self.named and "writer_id of its own" in text:
            self.named, self.second_first = True, self.sc.second_first
            self.writer_name = MAIN_WRITER
            order = "the mirror writer first" if self.second_first else "the query's writer first"
            self._note(f"both writers get a writer_id; the function calls {order}")
            return True
        if isinstance(exc, WriterConflictError) and "call that writer before this one" in text:
            self.second_first = False
            self._note("the function calls the query's writer first")
            return True
        return False
