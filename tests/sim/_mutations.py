"""Mutations of the protocol the simulation must catch: each disables one guard by replacing one function.

- ``zombie-check-off``: `fencing.refuse_if_superseded` returns without checking, so a superseded task
  attempt adopts a later attempt's barrier token and goes on appending.
- ``roll-call-ignored``: `roll_call.sign_in` signs in but reports no earlier attempt, so a retry whose
  attempt number restarted at 0 (a stage retry) is treated as a first attempt and reads nothing back.
- ``read-back-end-uncovered``: `StreamTotals.covers` does nothing, so a retry that dropped records an earlier
  attempt wrote reports an end before them and the ledger commits a stream end short of the batch.

``python -m tests.sim.mutations MUTATION PROFILE COUNT`` counts the schedules that catch one.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from s2_sink._exactly_once import fencing, roll_call
from s2_sink._exactly_once import task as eo_task
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


MUTATIONS: tuple[str, ...] = ("zombie-check-off", "roll-call-ignored", "read-back-end-uncovered")


@contextlib.contextmanager
def mutated(name: str) -> Iterator[None]:
    """The protocol with mutation `name` applied (every module's reference to the function replaced)."""
    patches: list[tuple[object, str, object]] = []
    if name == "zombie-check-off":
        patches = [(fencing, "check_not_superseded", _no_zombie_check)]
    elif name == "roll-call-ignored":
        patches = [(eo_task, "sign_in", _ignore_roll_call(roll_call.sign_in))]
    elif name == "read-back-end-uncovered":
        patches = [(StreamTotals, "covers", _no_cover)]
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
