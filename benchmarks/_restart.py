"""A scheduled ``availableNow`` job's restarts (the ``shape`` section's ``restart`` measurement).

The README's first example as a scheduled job runs it: JSON files land in a directory, and each run of the
job is a streaming query over them with ``trigger(availableNow=True)`` into ``foreachBatch(S2Writer(cfg))``
(exactly-once, a new writer object per run, as a new job run has), run to its end on one checkpoint. Per
round, on a fresh checkpoint and stream, one 1,000-row file lands before each run:

1. ``first``: the job's first run (its batch creates the stream, the ledger and the sign-in register);
2. ``restart``: the next run, after a clean end, nothing in flight: a normal batch, no recovery;
3. ``interrupted``: the next run's writer stops after the batch was written, before its ledger commit, as a
   driver dying at the crash point ``after_tasks_before_commit`` would (in this process: the commit raises,
   the run fails; Spark's offset log has the batch, its commit log does not) — not timed;
4. ``recovery``: the next run replays that batch; the ledger ends in its ``intent``, so the writer recovers
   (reads the stream back from the last commit and subtracts what the interrupted run wrote).

A run's batch time is its progress's ``triggerExecution``. Targets: restart / first <= 1.5 and recovery /
first <= 2 (medians over the rounds). Each round's stream is read back whole: 3,000 data records, each row
once; and the runs must have recovered where expected (the writer's "replays after a driver restart" log
line), or the round is an error. The process stays up between runs (Spark, the writer's connection pool),
where a scheduled job starts a new one: the fixed start-up of a process is in neither batch.
"""

from __future__ import annotations

import json
import logging
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks import _s2
from benchmarks._cases import _config

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from benchmarks._cases import Ctx

__all__ = ["RECOVERY_TARGET", "RESTART_TARGET", "restarts"]

RESTART_TARGET = 1.5
RECOVERY_TARGET = 2.0
ROWS = 1000
SCHEMA = "id long, store long, amount double"
_RECOVERY_LOGGER = "s2_sink._write.driver.delivery"


class _Interrupted(Exception):
    """The stand-in for a driver that died after the batch was written, before the ledger commit."""


class _Recoveries(logging.Handler):
    """Counts the writer's "replays after a driver restart" warnings (one per recovered batch)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "replays after a driver restart" in record.getMessage():
            self.count += 1


def _land(src: Path, run: int) -> None:
    rows = [{"id": run * ROWS + i, "store": i % 7, "amount": i * 1.5} for i in range(ROWS)]
    tmp = src.parent / f".part-{run}.json"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.rename(src / f"part-{run}.json")  # whole files only, as a landing zone gets them


def _run(spark: SparkSession, ctx: Ctx, src: Path, ckpt: str, stream: str, *, interrupt: bool) -> float:
    """One availableNow run to its end; its one batch's triggerExecution in seconds."""
    from s2_sink.writer import S2Writer

    writer = S2Writer(_config(ctx, stream), writer_id=f"bench-{stream}")
    if interrupt:

        def dies_before_commit(job: Any, metrics: Any) -> None:
            raise _Interrupted(f"interrupted after writing batch {job.batch_id}, before its commit")

        writer.mode.commit = dies_before_commit  # type: ignore[method-assign]
    query = (
        spark.readStream.schema(SCHEMA)
        .json(str(src))
        .writeStream.foreachBatch(writer)
        .option("checkpointLocation", ckpt)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(600)
    except Exception:
        if not interrupt:
            raise
        return 0.0
    finally:
        if query.isActive:
            query.stop()
    if interrupt:
        raise RuntimeError("the interrupted run ended without the interruption")
    done = [p for p in query.recentProgress if p["numInputRows"] > 0]
    if len(done) != 1 or done[0]["numInputRows"] != ROWS:
        raise RuntimeError(f"expected one batch of {ROWS} rows, got {[p['numInputRows'] for p in done]}")
    return float(done[0]["durationMs"]["triggerExecution"]) / 1000


def _round(spark: SparkSession, ctx: Ctx) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="sched-", dir=ctx.tmp))
    src, ckpt = work / "landing", str(work / "checkpoint")
    src.mkdir()
    stream = f"sched-{uuid.uuid4().hex[:8]}"
    recoveries = _Recoveries()
    logging.getLogger(_RECOVERY_LOGGER).addHandler(recoveries)
    try:
        times: dict[str, float] = {}
        seen: list[int] = []
        for run, name in enumerate(("first", "restart", "interrupted")):
            _land(src, run)
            times[name] = _run(spark, ctx, src, ckpt, stream, interrupt=name == "interrupted")
            seen.append(recoveries.count)
        times["recovery"] = _run(spark, ctx, src, ckpt, stream, interrupt=False)
        seen.append(recoveries.count)
    finally:
        logging.getLogger(_RECOVERY_LOGGER).removeHandler(recoveries)
    if seen != [0, 0, 0, 1]:
        raise RuntimeError(f"recovered batches after each run {seen}, expected [0, 0, 0, 1]")
    held = _s2.data_records_all(ctx.endpoint, ctx.basin, stream)
    if held != 3 * ROWS:
        raise RuntimeError(f"the stream holds {held} data records, expected {3 * ROWS}")
    del times["interrupted"]
    return times


def restarts(spark: SparkSession, ctx: Ctx, rounds: int) -> dict[str, Any]:
    """The scheduled job's batch times per run kind, over `rounds` rounds, and the two ratios."""
    runs = [_round(spark, ctx) for _ in range(rounds)]
    med = {k: statistics.median(r[k] for r in runs) for k in ("first", "restart", "recovery")}
    restart, recovery = med["restart"] / med["first"], med["recovery"] / med["first"]
    return {
        "label": f"README first example as a scheduled availableNow job, {ROWS:,} rows/run, exactly-once",
        "rounds": rounds,
        "first_ms": med["first"] * 1000,
        "restart_ms": med["restart"] * 1000,
        "recovery_ms": med["recovery"] * 1000,
        "runs_ms": [{k: round(v * 1000, 1) for k, v in r.items()} for r in runs],
        "restart_ratio": restart,
        "recovery_ratio": recovery,
        "restart_target": RESTART_TARGET,
        "recovery_target": RECOVERY_TARGET,
        "met": restart <= RESTART_TARGET and recovery <= RECOVERY_TARGET,
    }
