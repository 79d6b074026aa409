"""Mutations of the protocol the simulation must catch: each disables one guard by replacing one function.

- ``zombie-check-off``: `fencing.refuse_if_superseded` returns without checking, so a superseded task
  attempt adopts a later attempt's barrier token and goes on appending.
- ``roll-call-ignored``: `sign_in_registers.sign_in` signs in but reports no earlier attempt, so a retry whose
  attempt number restarted at 0 (a stage retry) is treated as a first attempt and reads nothing back.
- ``read-back-end-uncovered``: `StreamTotals.covers` does nothing, so a retry that dropped records an earlier
  attempt wrote reports an end before them and the ledger commits a stream end short of the batch.
- ``change-unchecked``: `shape.check_restart` never refuses, so a restart with another routing or dead-letter
  stream recovers a batch in flight by reading back streams its written rows are not in (``changed``).
- ``takeover-not-exclusive``: `takeover.mark_moved` marks a ledger moved only when nobody did, and goes on
  when another identity did (the take-over before it was exclusive): two drivers under new ids both take one
  ledger over (``two-drivers``).
- ``second-call-unchecked``: without a run id, a second call of one identity in a micro-batch returns early
  from the checks (`Coordinator._check_not_called_twice`, `ExactlyOnce._claim`) and finds the batch
  committed (``unreadable-run-id``).
- ``reader-ignores-moved-to``: `CommittedEnds` reads the ledger it is bound to only, not the one a take-over
  moved its batches to (``two-drivers``).
- ``takeover-ignores-routing``: `takeover._related` takes any ledger of the query for this writer's, so a
  second writer named after the refusal, called first, takes the first writer's ledger over
  (``named-writers``).

``python -m tests.sim._mutations MUTATION PROFILE COUNT`` counts the schedules that catch one.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

from s2_sink._exactly_once import coordinator, epoch_plan, fencing, sign_in_registers, takeover
from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.ledger import Ledger
from s2_sink._read.planning.committed import CommittedEnds
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.delivery import ExactlyOnce
from s2_sink._write.task.results import StreamTotals

__all__ = ["MUTATIONS", "mutated"]


async def _no_zombie_check(*args: Any, **kwargs: Any) -> int:
    """The zombie check that finds nothing: no later attempt, no generation of the run seen."""
    del args, kwargs
    return -1


def _ignore_roll_call(original: Callable[..., Any]) -> Callable[..., Any]:
    async def sign_in(*args: Any, **kwargs: Any) -> bool:
        await original(*args, **kwargs)
        return False

    return sign_in


def _no_cover(self: StreamTotals, end: int) -> None:
    del self, end


async def _moved_unless_taken(old: Any, me: str) -> None:
    """The take-over's mark before it was exclusive: append ``moved_to`` only where none is."""
    await old.load()
    if old.state.moved_to is None:
        await old.append(replace(old.state, moved_to=me))


def _early_return_without_run(original: Callable[..., Any]) -> Callable[..., Any]:
    def check(self: Any, coord_or_batch: Any, *args: Any) -> Any:
        spark_run = args[-1]
        if spark_run is None:
            return None
        return original(self, coord_or_batch, *args)

    return check


async def _not_followed(self: CommittedEnds) -> tuple[int, Any]:
    basin = get_pool().client(self._cfg).basin(self._cfg.basin)
    found = await Ledger(basin, self.writer_id).peek(self._seen)
    assert found is not None
    return found


MUTATIONS: tuple[str, ...] = (
    "zombie-check-off",
    "roll-call-ignored",
    "read-back-end-uncovered",
    "change-unchecked",
    "takeover-not-exclusive",
    "second-call-unchecked",
    "reader-ignores-moved-to",
    "takeover-ignores-routing",
)


@contextlib.contextmanager
def mutated(name: str) -> Iterator[None]:
    """The protocol with mutation `name` applied (every module's reference to the function replaced)."""
    patches: list[tuple[object, str, object]] = []
    if name == "zombie-check-off":
        patches = [(fencing, "check_not_superseded", _no_zombie_check)]
    elif name == "roll-call-ignored":
        patches = [(epoch_plan, "sign_in", _ignore_roll_call(sign_in_registers.sign_in))]
    elif name == "read-back-end-uncovered":
        patches = [(StreamTotals, "covers", _no_cover)]
    elif name == "change-unchecked":
        patches = [(coordinator, "check_restart", lambda shapes, new, **_: [])]
    elif name == "takeover-not-exclusive":
        patches = [(takeover, "mark_moved", _moved_unless_taken)]
    elif name == "second-call-unchecked":
        patches = [
            (
                Coordinator,
                "_check_not_called_twice",
                _early_return_without_run(Coordinator._check_not_called_twice),
            ),
            (ExactlyOnce, "_claim", _early_return_without_run(ExactlyOnce._claim)),
        ]
    elif name == "reader-ignores-moved-to":
        patches = [(CommittedEnds, "_find", _not_followed)]
    elif name == "takeover-ignores-routing":
        patches = [(takeover, "_related", lambda state, shape: True)]
    else:
        raise ValueError(f"unknown mutation {name!r}; one of {MUTATIONS}")
    saved = [(owner, attr, getattr(owner, attr)) for owner, attr, _ in patches]
    try:
        for owner, attr, value in patches:
            setattr(owner, attr, value)
        yield
    finally:
        for owner, attr, value in saved:
            setattr(owner, attr, value)


def main(argv: list[str]) -> int:
    from tests.sim._run import run_schedule

    mutation, profile, count = argv[0], argv[1], int(argv[2])
    caught = 0
    with mutated(mutation):
        for seed in range(count):
            caught += run_schedule(seed, profile).violation is not None  # type: ignore[arg-type]
    print(f"{mutation} on {profile}: caught in {caught} of {count} schedules")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
