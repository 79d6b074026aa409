"""Run one schedule: scenario and scheduler from a seed, the query to its end, then the invariants."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, replace

from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import SessionPool, install_pool
from s2_sink._write.spec import Delivery
from tests.sim._invariants import (
    Violation,
    check_batches,
    check_ledger,
    check_upsert_order,
    duplicates_untagged,
)
from tests.sim._memory_s2 import MemoryService
from tests.sim._operator import check_reset_stop
from tests.sim._read_committed import ReadCommittedWatch, check_read_committed, check_readers_follow
from tests.sim._scenario import OTHER_QUERY_ID, Profile, Row, Scenario
from tests.sim._scheduler import Scheduler
from tests.sim._sink_front import task_contexts
from tests.sim._spark import BASIN, Query

__all__ = ["Outcome", "run_schedule"]


@dataclass
class Outcome:
    """How one schedule went: its trace, a digest of everything it wrote, and the violation if any."""

    scenario: Scenario
    trace: list[str]
    digest: str
    service: MemoryService
    violation: str | None = None
    refused: bool = False
    reset: bool = False
    """The query stopped with `StreamResetError` (``recreated`` only)."""
    faults: int = 0
    zombie_steps: int = 0
    """Steps taken by tasks of an earlier driver run after a restart."""
    duplicates: int = 0
    """At-least-once control only: records written more than once."""

    def report(self) -> str:
        """A readable account of the schedule, for a failing seed."""
        sc = self.scenario
        lines = [
            sc.describe(),
            f"replay: python -m tests.sim --seed {sc.seed} --profile {sc.profile}",
            *(f"  batch {b}: {[_shown(r) for r in rows]}" for b, rows in enumerate(sc.batches)),
            *(
                f"  batch {b} before compaction: {[_shown(r) for r in rows]}"
                for b, rows in enumerate(sc.changes)
            ),
            "schedule (actor: step -> fault):",
            *self.trace,
        ]
        if self.violation is not None:
            lines.append(f"VIOLATION: {self.violation}")
        return "\n".join(lines)


def _shown(row: Row) -> tuple[object, ...]:
    shown = (row.stream, row.body, row.headers, row.error)
    return shown if row.order is None else (*shown, f"order {row.order}")


def run_schedule(seed: int, profile: Profile = "default", delivery: Delivery = "exactly-once") -> Outcome:
    """Run schedule `seed` of `profile` to its end and check the invariants. With ``at-least-once`` (the
    control: `S2Writer` only) nothing is checked but that no record is lost; `Outcome.duplicates` counts
    the records written twice."""
    logger = logging.getLogger("s2_sink")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # thousands of schedules of retries and restarts: quiet, and faster
    try:
        with task_contexts():
            return _run(seed, profile, delivery)
    finally:
        logger.setLevel(level)


def _run(seed: int, profile: Profile, delivery: Delivery) -> Outcome:
    scenario = Scenario.draw(seed, profile)
    if delivery == "at-least-once":
        scenario = replace(scenario, front="writer")
    sched = Scheduler(seed)
    service = MemoryService(sched, BASIN)
    query = Query(scenario, sched, service, delivery)
    other = Query(scenario, sched, service, delivery, other=query) if scenario.shared else None
    sched.policy = query.policy
    if delivery == "exactly-once":
        sched.observe = ReadCommittedWatch(service.store, BASIN, scenario, query.mirror_ledger)
    violation: str | None = None
    duplicates = 0
    try:
        query.start()
        if other is not None:
            other.start()
        sched.run()
        sched.join_threads()
        for actor in sched.actors:
            if isinstance(actor.error, Violation):
                raise actor.error
        if delivery == "at-least-once":
            if not query.finished:
                raise Violation(f"the query never completed; its last run failed with {query.last_failure}")
            duplicates = duplicates_untagged(service.store, BASIN, scenario)
        elif other is not None and not other.finished:
            raise Violation(
                f"{OTHER_QUERY_ID} never completed; its last run failed with {other.last_failure}"
            )
        elif query.finished:
            check_batches(service.store, BASIN, scenario, len(scenario.batches) + len(scenario.shared))
            check_upsert_order(service.store, BASIN, scenario)
        elif query.refused is not None:
            check_batches(service.store, BASIN, scenario, query.ledger_committed)
            check_upsert_order(service.store, BASIN, scenario, query.ledger_committed)
        elif query.reset is not None and scenario.profile == "recreated":
            # The writer failed closed on a stream the schedule deleted: an accepted stop of this profile.
            check_reset_stop(query.reset, service.store)
            check_batches(service.store, BASIN, scenario, query.ledger_committed)
        else:
            raise Violation(f"the query never completed; its last run failed with {query.last_failure}")
        check_ledger(service.store, BASIN)
        if delivery == "exactly-once":
            _check_exactly_once_end(service, scenario, query)
    except AssertionError as exc:
        violation = f"{type(exc).__name__}: {exc}"
    finally:
        _runtime.run(service.end_sessions())
        query.close()
        install_pool(SessionPool())
    return Outcome(
        scenario,
        sched.trace,
        _digest(sched.trace, service),
        service,
        violation,
        refused=query.refused is not None,
        reset=query.reset is not None and not query.finished,
        faults=query.faults,
        zombie_steps=query.zombie_steps,
        duplicates=duplicates,
    )


def _check_exactly_once_end(service: MemoryService, scenario: Scenario, query: Query) -> None:
    """What an exactly-once schedule must end with besides every row once: readers of every ledger
    bounded by committed batches, following take-overs; a second call of one identity refused."""
    check_read_committed(service.store, BASIN, scenario, query.mirror_ledger)
    if query.finished and not scenario.shared:
        check_readers_follow(service.store, query.cfg)
    if scenario.second in ("same object", "same destination") and query.refused is None:
        raise Violation(
            f"a second call of one identity in a micro-batch ({scenario.second}) was not refused: its frame "
            "was skipped, or written on top of the first"
        )


def _digest(trace: list[str], service: MemoryService) -> str:
    """A hash of the schedule and of every record of every data stream (ledger records hold run uuids)."""
    h = hashlib.sha256()
    for line in trace:
        h.update(line.encode() + b"\n")
    for stream in sorted(service.store.basin(BASIN).streams.values(), key=lambda s: s.name):
        if stream.name.startswith("_s2sink/") or stream.deleted_at is not None:
            continue
        h.update(stream.name.encode())
        for rec in stream.collect(0, 1 << 30, 1 << 62, None).records:
            h.update(len(rec).to_bytes(4, "big") + rec)
    return h.hexdigest()[:16]
