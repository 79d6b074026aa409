"""The exactly-once protocol's cost per micro-batch grows linearly (issue 25 item 6), counted at a lite
server by the Spark-free harness `benchmarks.eo_cost`: the real coordinator and `write_partition`, tasks as
calls."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from benchmarks.eo_cost import BatchCost, Door, measure
from s2_sink.lite import LiteServer

pytestmark = pytest.mark.scale  # tens of seconds of CPU: make test runs it, make test-fast does not

SMALL, LARGE = 10, 100
"""Task counts compared: big enough apart that T² shows (10x the tasks), small enough for a unit test."""
C = 2.0
"""Allowed growth of the per-task cost from SMALL to LARGE tasks (1.0 = exactly linear in tasks)."""


@pytest.fixture(scope="module")
def counting() -> Iterator[LiteServer]:
    """A lite server of its own that counts requests and records served."""
    with LiteServer(stats=True) as srv:
        yield srv


def _steady(srv: LiteServer, tasks: int, until: str = "steady") -> dict[str, BatchCost]:
    return {c.phase: c for c in measure(srv, "s2writer", tasks, 1, until=until)}


def test_records_read_per_task_do_not_grow_with_the_task_count(counting: LiteServer) -> None:
    """A normal micro-batch of 100 tasks reads at most C times as many records per task, driver and tasks
    together, as one of 10 tasks, and makes at most C times as many requests per task."""
    small = _steady(counting, SMALL)["steady"]
    large = _steady(counting, LARGE)["steady"]
    assert small.records_read >= SMALL  # every task reads its register's last sign-in
    assert large.requests / LARGE <= C * small.requests / SMALL
    assert large.records_read / LARGE <= C * small.records_read / SMALL


def test_a_batch_after_a_task_retry_costs_what_a_batch_before_it_cost(counting: LiteServer) -> None:
    """After one task retry (which bumps the stream's generation), a normal micro-batch of the same run reads
    no more records of the data stream than a normal micro-batch before the retry (none: no task reads
    back), and makes at most a quarter more requests."""
    costs = _steady(counting, 40, until="after-retry")
    steady, after = costs["steady"], costs["after-retry"]
    data = "data"
    assert after.task_side.records_read_by_stream.get(data, 0) <= steady.task_side.records_read_by_stream.get(
        data, 0
    )
    assert after.requests <= 1.25 * steady.requests


def test_the_plan_a_task_receives_does_not_grow_with_the_streams_written(counting: LiteServer) -> None:
    """The pickled plan every task receives is about as big after a batch that wrote 400 routed streams as
    after one that wrote 10: the ledger's stream ends do not travel with it."""
    few = {c.phase: c for c in measure(counting, "s2writer", 10, 10, until="steady")}["steady"]
    many = {c.phase: c for c in measure(counting, "s2writer", 10, 400, until="steady")}["steady"]
    assert many.plan_bytes <= C * few.plan_bytes


def test_format_sink_steady_batch_costs_no_more_per_routed_stream_than_s2writer(counting: LiteServer) -> None:
    """A normal micro-batch of the format('s2') sink into 200 routed streams makes no more requests than the
    same batch through S2Writer's coordinator, give or take a quarter: no fence and re-send per stream."""
    s2writer = {c.phase: c for c in measure(counting, "s2writer", 10, 200, until="steady")}["steady"]
    sink = {c.phase: c for c in measure(counting, "format", 10, 200, until="steady")}["steady"]
    assert sink.requests <= 1.25 * s2writer.requests


def test_a_retried_batch_reads_no_more_records_per_task_as_tasks_grow(counting: LiteServer) -> None:
    """In a micro-batch where one task is retried (its barrier moves the stream's generation and every other
    task adopts it on a 412), 100 tasks read at most C times as many records per task as 10 tasks: a task
    that adopts reads its sign-in register, one record, to know no later attempt of its partition fenced,
    and the retry reads the stream back once (before: every adopting task scanned the batch's records so
    far, T²/2 in all)."""
    small = _steady(counting, SMALL, until="retry")["retry"]
    large = _steady(counting, LARGE, until="retry")["retry"]
    assert large.records_read / LARGE <= C * small.records_read / SMALL


SPREAD_STREAMS = 24
"""Routed streams every task writes: more than the newer generations a plan ships (16)."""


@pytest.mark.parametrize("door", ["s2writer", "format"])
def test_a_batch_after_a_retry_of_many_routed_streams_costs_linearly(
    counting: LiteServer, door: Door
) -> None:
    """Every task writes each of 24 routed streams, and partition 0's retry moves the generation of all of
    them (more than a plan ships; format('s2') ships none). In the next micro-batch, 32 tasks read at most
    C times as many records, and make at most C times as many requests, per task as 8 tasks: a task meeting a
    moved generation asks its register, not the stream, whether it may adopt it (before: it scanned what the
    batch's other tasks had written to the stream so far)."""
    few, many = 8, 32
    small = {c.phase: c for c in measure(counting, door, few, SPREAD_STREAMS, spread=True)}["after-retry"]
    large = {c.phase: c for c in measure(counting, door, many, SPREAD_STREAMS, spread=True)}["after-retry"]
    assert large.records_read / many <= C * small.records_read / few
    assert large.requests / many <= C * small.requests / few


def test_routed_streams_new_in_a_run_cost_nothing_extra_in_later_batches(counting: LiteServer) -> None:
    """A run's first micro-batch creates 100 routed streams, and the task that creates one fences it to the
    epoch's generation 0 (the stream is empty, so no barrier was ever put up there), not to a generation of
    its own. So the next micro-batch sends one append per stream and reads, fences and re-sends nothing
    (before: every stream beyond the 16 generations a plan ships cost a 412, a tail, a scan and a re-send,
    every batch)."""
    steady = {c.phase: c for c in measure(counting, "s2writer", 10, 100, until="steady")}["steady"]
    kinds = steady.task_side.requests_by_kind
    assert kinds.get("append:data") == 100  # each stream's only append of its task: a unary append
    assert [k for k in kinds if k.endswith(":data") and k != "append:data"] == []


def test_the_format_sink_ships_a_run_not_growing_with_the_ledgers_streams(counting: LiteServer) -> None:
    """What every task of a format('s2') micro-batch receives (the pickled run and its write plan) is about as
    big when the ledger holds 1,000 committed routed streams as when it holds 100: the ends beyond the
    static streams' travel as a ledger position, not as a map (before: 21 KB at 1,000, 219 KB at 10,000).
    The harness measures 1,000 against 10,000; a unit test stops at 1,000, each stream written once."""
    few = {c.phase: c for c in measure(counting, "format", 10, 100, until="steady")}["steady"]
    many = {c.phase: c for c in measure(counting, "format", 10, 1000, until="steady")}["steady"]
    assert many.plan_bytes <= 1.1 * few.plan_bytes
