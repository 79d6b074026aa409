"""What the exactly-once protocol costs per micro-batch, in S2 requests and records read, without Spark.

    python -m benchmarks.eo_cost [--tasks 10,1000] [--streams 1,1000] [--door s2writer|format|both]
        [--until start|steady|retry|after-retry] [--spread] [--create-streams] [--json PATH]

The protocol's real blocks run against a lite server in this process that counts, per stream, every request
by kind and every record it serves (``LiteServer(stats=True)``); nothing of the writer is wrapped. Spark is
left out: what the protocol sees of it is a driver that plans and commits each micro-batch and task attempts
with distinct task ids, so those are plain calls here.

- ``s2writer``: the driver side of ``foreachBatch(S2Writer(...))`` — `Coordinator.begin_batch`,
  `WriteSpec.plan`, `Coordinator.commit_batch`, as `ExactlyOnce.prepare`/`commit` call them;
- ``format``: the ``format("s2")`` sink — `open_sink_run` (driver, when Spark pickles the writer),
  `SinkRun.plan_batch` (each task), `commit_sink_run` (driver);
- the tasks: `write_partition` once per task, one after the other, each with its own partition and a new
  task id. Task p writes one record to each of its streams: the single stream ``events`` (S = 1), or the
  routed streams ``r/<i>`` with ``i ≡ p (mod T)`` (every stream gets one record when S >= T, else task p
  writes to stream ``p mod S``). With ``--spread``, every task writes one record to every routed stream
  (T x S records): partition 0's retry then moves the generation of all S streams, more than a plan ships.

Four micro-batches of one run: ``start`` (the run's first: ledger load, ``open``, fences), ``steady`` (a
normal batch), ``retry`` (partition 0's first attempt writes, then a second attempt of it), and
``after-retry`` (a normal batch after that retry). Each row splits the counts into the driver's steps and the
tasks', and by bookkeeping stream (``ledger``, ``roll``) or data stream (``data``); ``plan_bytes`` is the
pickled size of the `WritePlan` every task receives; it also reports this process's peak RSS and the most file
descriptors and HTTP/2 streams open while the tasks ran (`benchmarks.writer_path`'s sampler; the lite server's
share included: it runs here too). The last output line is one JSON object.

Issue 25's grid is ``--tasks 10,1000,10000 --streams 1,1000,100000``. The default stops at 1,000: on the
protocol as of this harness, 10,000 tasks read 50 million roll call records per micro-batch (hours here),
and 100,000 routed streams take tens of minutes per micro-batch in one process (every task and append
runs here, one after the other).
"""

from __future__ import annotations

import argparse
import itertools
import json
import pickle
import resource
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import pyarrow as pa

from benchmarks.writer_path import _Peaks
from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.ledger import LEDGER_PREFIX
from s2_sink._exactly_once.sign_in_registers import REGISTER_PREFIX
from s2_sink._exactly_once.sink_run import commit_sink_run, open_sink_run
from s2_sink._write.driver.metrics import BatchMetrics, aggregate
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.lite import LiteServer
from s2_sink.lite._stats import StatsSnapshot
from s2_sink.testing import fresh_basin

__all__ = ["PHASES", "BatchCost", "measure"]

Door = Literal["s2writer", "format"]
PHASES = ("start", "steady", "retry", "after-retry")
_QUERY = "5f0c2a7e-0000-4000-8000-00000000c057"
REQUEST_TIMEOUT_MS = 600_000
"""The client's per-request timeout here (the sink's default is 10 s). The lite server is a thread of this
process, so while a task encodes and sends a burst of appends (10,000 streams at 100,000 routed streams), the
server's answers wait for the GIL: an answer can take longer than 10 s on a loaded machine though the server
took none of that time. A timed-out append is ambiguous, and an exactly-once task rightly fails rather than
send it again; the counts are what this harness measures, so it waits instead."""


@dataclass
class Side:
    """Requests and records read by one side (driver or tasks) in one micro-batch."""

    requests: int = 0
    records_read: int = 0
    requests_by_kind: dict[str, int] = field(default_factory=dict)
    records_read_by_stream: dict[str, int] = field(default_factory=dict)
    """By kind of stream: ``ledger``, ``roll`` (bookkeeping) or ``data``."""


@dataclass
class BatchCost:
    """One micro-batch of one scenario."""

    door: str
    tasks: int
    streams: int
    phase: str
    driver: Side
    task_side: Side
    plan_bytes: int
    seconds: float
    spread: bool = False
    """Every task wrote every routed stream."""
    max_open_fds: int = 0
    max_open_h2_streams: int = 0
    peak_rss_mib: int = 0
    """This process's (the tasks', the driver's and the lite server's), sampled during the micro-batch."""

    @property
    def requests(self) -> int:
        return self.driver.requests + self.task_side.requests

    @property
    def records_read(self) -> int:
        return self.driver.records_read + self.task_side.records_read


def _kind_of_stream(name: str) -> str:
    if name.startswith(LEDGER_PREFIX):
        return "ledger"
    if name.startswith(REGISTER_PREFIX):
        return "roll"
    return "data" if name else "control"


def _side(delta: StatsSnapshot) -> Side:
    side = Side()
    kinds: Counter[str] = Counter()
    reads: Counter[str] = Counter()
    for (kind, stream), n in delta.requests.items():
        kinds[f"{kind}:{_kind_of_stream(stream)}"] += n
        side.requests += n
    for stream, n in delta.records_read.items():
        reads[_kind_of_stream(stream)] += n
        side.records_read += n
    side.requests_by_kind = dict(sorted(kinds.items()))
    side.records_read_by_stream = dict(sorted(reads.items()))
    return side


def _add(a: StatsSnapshot, b: StatsSnapshot) -> StatsSnapshot:
    return StatsSnapshot(
        a.requests + b.requests, a.records_read + b.records_read, a.records_appended + b.records_appended
    )


def _targets(partition: int, tasks: int, streams: int, spread: bool = False) -> list[str]:
    if streams == 1:
        return ["events"]
    if spread:
        return [f"r/{i}" for i in range(streams)]
    if streams >= tasks:
        return [f"r/{i}" for i in range(partition, streams, tasks)]
    return [f"r/{partition % streams}"]


def _frame(batch: int, partition: int, targets: list[str], routed: bool) -> pa.RecordBatch:
    bodies = [b"b%d-p%d-%d" % (batch, partition, i) for i in range(len(targets))]
    cols: dict[str, pa.Array] = {"_s2_body": pa.array(bodies, pa.binary())}
    if routed:
        cols[STREAM_COLUMN] = pa.array(targets, pa.string())
    return pa.record_batch(cols)


class _Scenario:
    """One writer identity in a fresh basin, driven through `PHASES`."""

    def __init__(
        self,
        srv: LiteServer,
        door: Door,
        tasks: int,
        streams: int,
        *,
        spread: bool = False,
        create_streams: bool = False,
    ) -> None:
        assert srv.stats is not None
        self.srv = srv
        self.stats = srv.stats
        self.door = door
        self.tasks = tasks
        self.streams = streams
        self.spread = spread
        # Streams created by the basin at their first append, or (`create_streams`) by the tasks.
        basin = fresh_basin(srv.endpoint, create_stream_on_append=not create_streams)
        routed = streams > 1
        self.cfg = S2Config(
            basin=basin,
            stream=None if routed else "events",
            access_token="test",
            account_endpoint=srv.endpoint,
            basin_endpoint=srv.endpoint,
            request_timeout_ms=REQUEST_TIMEOUT_MS,
            create_streams=create_streams,
        )
        routing = Routing.build(
            stream=self.cfg.stream, stream_column="target" if routed else None, shards=None
        )
        self.spec = WriteSpec.build(self.cfg, routing)
        self.routed = routed
        self.writer_id = f"cost-{door}-{tasks}-{streams}{'-spread' if spread else ''}"
        self.task_ids = itertools.count(1)
        self.coord = Coordinator(
            self.spec.cfg, self.writer_id, query_id=_QUERY, static_streams=self.spec.static_streams()
        )

    def _snap(self) -> StatsSnapshot:
        return self.stats.snapshot()

    def _write(self, plan_of: Callable[[], WritePlan], batch: int, partition: int, attempt: int) -> list[Any]:
        targets = _targets(partition, self.tasks, self.streams, self.spread)
        ctx = PartitionContext(batch, partition, attempt, next(self.task_ids), batch)
        frame = _frame(batch, partition, targets, self.routed)
        return list(write_partition(plan_of(), [frame], ctx).to_pylist())

    def batch(self, batch: int, phase: str) -> BatchCost:
        started = time.monotonic()
        before = self._snap()
        plan_of, commit, plan_bytes = self._driver_plan(batch)
        planned = self._snap()
        rows: list[Any] = []
        with _Peaks() as peaks:
            if phase == "retry":  # partition 0 fails after writing, its second attempt writes it again
                self._write(plan_of, batch, 0, 0)
            for p in range(self.tasks):
                rows += self._write(plan_of, batch, p, 1 if phase == "retry" and p == 0 else 0)
        written = self._snap()
        commit(aggregate(batch, rows, 0.0, delivery="exactly-once"))
        after = self._snap()
        return BatchCost(
            self.door,
            self.tasks,
            self.streams,
            phase,
            _side(_add(planned - before, after - written)),
            _side(written - planned),
            plan_bytes,
            time.monotonic() - started,
            self.spread,
            peaks.fds,
            peaks.h2_streams,
            round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        )

    def _driver_plan(self, batch: int) -> tuple[Callable[[], WritePlan], Callable[[BatchMetrics], None], int]:
        """Driver step before the tasks: the plan each task gets, the commit step, the pickled plan size."""
        if self.door == "s2writer":
            epoch = self.coord.begin_batch(batch, "run-1")
            assert epoch is not None
            plan = self.spec.plan(batch, epoch)

            def commit(metrics: BatchMetrics) -> None:  # as ExactlyOnce.commit
                self.coord.commit_batch(batch, metrics.end_positions())
                self.coord.remember_tokens(metrics.stream_tokens())

            return (lambda: plan), commit, len(pickle.dumps(plan))
        run = open_sink_run(self.cfg, self.writer_id, _QUERY, self.spec.static_streams())

        def task_plan() -> WritePlan:  # each task plans from the pickled run (SinkRun.plan_batch)
            epoch = run.plan_batch(batch, _QUERY)
            assert epoch is not None
            return self.spec.plan(batch, epoch)

        def commit_run(metrics: BatchMetrics) -> None:
            commit_sink_run(self.cfg, self.writer_id, run, batch, metrics.end_positions(), query_id=_QUERY)

        return task_plan, commit_run, len(pickle.dumps(run)) + len(pickle.dumps(task_plan()))


def measure(
    srv: LiteServer,
    door: Door,
    tasks: int,
    streams: int,
    *,
    until: str = PHASES[-1],
    spread: bool = False,
    create_streams: bool = False,
) -> Iterator[BatchCost]:
    """The micro-batches of `PHASES` for one scenario, in order, up to and including `until`; with
    `spread`, every task writes every routed stream; with `create_streams`, the tasks create the streams
    (else the basin creates them at their first append)."""
    scenario = _Scenario(srv, door, tasks, streams, spread=spread, create_streams=create_streams)
    for batch, phase in enumerate(PHASES[: PHASES.index(until) + 1]):
        yield scenario.batch(batch, phase)


def _ints(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x]


def _line(c: BatchCost) -> str:
    return (
        f"{c.door:8} T={c.tasks:<6} S={c.streams:<7}{'*' if c.spread else ' '} {c.phase:11} "
        f"driver {c.driver.requests:>6} req {c.driver.records_read:>8} rec | "
        f"tasks {c.task_side.requests:>7} req {c.task_side.records_read:>10} rec "
        f"({c.task_side.records_read / c.tasks:>9.1f}/task) | plan {c.plan_bytes:>9} B | {c.seconds:6.1f} s"
        f" | peak {c.peak_rss_mib} MiB, {c.max_open_fds} fds, {c.max_open_h2_streams} HTTP/2 streams"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="10,1000", help="comma-separated task counts")
    ap.add_argument(
        "--streams", default="1,1000", help="comma-separated routed stream counts (1: one stream)"
    )
    ap.add_argument("--door", choices=("s2writer", "format", "both"), default="both")
    ap.add_argument("--until", choices=PHASES, default=PHASES[-1], help="the last phase to run")
    ap.add_argument("--spread", action="store_true", help="every task writes every routed stream")
    ap.add_argument(
        "--create-streams", action="store_true", help="the tasks create the streams (create_streams=True)"
    )
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args(argv)
    doors: list[Door] = ["s2writer", "format"] if args.door == "both" else [args.door]
    out: list[dict[str, Any]] = []
    # One sweep over every stream a minute (S2-lite's background tasks' interval), not five a second: at
    # 100,000 streams the lite server's default sweeps took half this process's CPU, for nothing it counts.
    with LiteServer(stats=True, sweep_interval_s=60.0) as srv:
        for door, tasks, streams in itertools.product(doors, _ints(args.tasks), _ints(args.streams)):
            costs = measure(
                srv,
                door,
                tasks,
                streams,
                until=args.until,
                spread=args.spread,
                create_streams=args.create_streams,
            )
            for cost in costs:
                print(_line(cost), flush=True)
                out.append({**asdict(cost), "requests": cost.requests, "records_read": cost.records_read})
    doc = {"benchmark": "eo_cost", "results": out}
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
    print(json.dumps(doc, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
