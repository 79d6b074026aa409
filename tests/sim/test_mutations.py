"""The simulation catches the protocol's guards switched off, one at a time, in most schedules of the
profile that exercises each (tests/sim/_mutations.py applies them; `python -m tests.sim._mutations`
counts over more seeds)."""

from __future__ import annotations

import pytest

from tests.sim._mutations import mutated
from tests.sim._run import run_schedule
from tests.sim._scenario import Profile

SCHEDULES = 40


def _caught(mutation: str, profile: Profile) -> int:
    with mutated(mutation):
        return sum(run_schedule(seed, profile).violation is not None for seed in range(SCHEDULES))


@pytest.mark.parametrize(
    ("mutation", "profile"),
    [
        ("zombie-check-off", "zombie-takeover"),
        ("roll-call-ignored", "stage-zombies"),
        ("read-back-end-uncovered", "retry-readback"),
        ("change-unchecked", "changed"),
        ("takeover-not-exclusive", "two-drivers"),
        ("second-call-unchecked", "unreadable-run-id"),
        ("reader-ignores-moved-to", "two-drivers"),
        ("takeover-ignores-routing", "named-writers"),
    ],
)
def test_the_simulation_catches_a_disabled_guard_in_most_schedules(mutation: str, profile: Profile) -> None:
    """Without the zombie check a superseded attempt that comes back after an operator cleared its retry's
    barrier takes the stream with a generation of its own and appends on (duplicates);
    with the roll call ignored a stage retry's attempt 0 reads nothing back (duplicates); with the read-back
    end not covered the commit records a stream end before records a retry dropped from its own appends (a
    read-committed reader misses them); with a batch in flight not checked against a changed writer, the
    replay reads back streams its rows are not in (duplicates); with take-overs not exclusive, two drivers
    under new ids both go on from one ledger (duplicates); without a run id, returning early skips a second
    call (its frame lost); a reader not following a take-over stops at the old ledger's commits; a take-over
    that ignores the routing gives a new writer another writer's ledger (lost and duplicated rows). Each is
    caught in more than half of its profile's schedules; the same schedules pass unmutated (test_sim.py)."""
    caught = _caught(mutation, profile)
    assert caught > SCHEDULES // 2, f"{mutation}: caught in only {caught} of {SCHEDULES} {profile} schedules"
