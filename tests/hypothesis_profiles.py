"""Hypothesis profiles. `make test` runs every property test with its full example count; `make test-fast`
loads the derandomized ``fast`` profile (``--hypothesis-profile=fast``), in which a property test whose full
count costs seconds runs the smaller count named beside it: a count checked to still find the bug the test
guards (the code it checks, broken on purpose, fails the test under the fast profile too).

No profile has a per-example deadline: speed is the benchmark's to measure, and on a loaded machine a
deadline fails correct code."""

from __future__ import annotations

from hypothesis import settings

FAST = "fast"
UNTIMED = "untimed"
settings.register_profile(FAST, derandomize=True, deadline=None)
settings.register_profile(UNTIMED, deadline=None)
settings.load_profile(UNTIMED)  # make test's; --hypothesis-profile=fast replaces it after this import


def examples(full: int, *, fast: int) -> int:
    """A property test's example count: `full` in `make test`, `fast` under the fast profile."""
    return fast if settings.get_current_profile_name() == FAST else full
