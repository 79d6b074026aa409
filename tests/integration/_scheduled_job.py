"""The serverless job shape under Spark Connect, run in its own process by test_scheduled_connect.py.

    python -m tests.integration._scheduled_job <endpoint> <basin> <workdir>

A Databricks serverless job streams with ``trigger(availableNow=True)`` only: each scheduled run drains what
arrived since the last one and stops. This runs that schedule five times against one checkpoint, a new file
landing before each run, with the third run's Python worker killed after an append went out and before its ack
(``S2SINK_CRASH_PLAN``; local[2] does not retry tasks, so that run fails as a job run would, and the next run
replays the batch). Prints one JSON line with what each run did; the test reads the stream back itself.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

RUNS = 5
ROWS_PER_RUN = 600
CRASHED_RUN = 2  # zero-based: the third run
SCHEMA = "id long, run int, name string"
# Micro-batch 2 is the crashed run's file: one partition of 600 rows, appends of 100, killed after the third.
CRASH = {"point": "after_append_before_ack", "batch": 2, "partition": 0, "chunk": 2, "action": "exit"}


def _land_file(src: Path, run: int) -> None:
    rows = [{"id": run * ROWS_PER_RUN + i, "run": run, "name": f"r{run}-{i}"} for i in range(ROWS_PER_RUN)]
    tmp = src.parent / f".part-{run}.json"
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.rename(src / f"part-{run}.json")  # whole files only, as a landing zone gets them


def _batch_ids(query: Any) -> list[int]:
    """The micro-batches this run completed (an availableNow run with nothing new completes none)."""
    progress = [json.loads(p.json) if hasattr(p, "json") else p for p in query.recentProgress]
    return [int(p["batchId"]) for p in progress]


def main(endpoint: str, basin: str, workdir: str) -> dict[str, Any]:
    """Five availableNow runs of one exactly-once foreachBatch query, each restarted from its checkpoint."""
    work = Path(workdir)
    plan = work / "crash-plan.json"
    plan.write_text(json.dumps({"rules": []}))
    os.environ["S2SINK_CRASH_PLAN"] = str(plan)  # before the Connect server starts its Python workers

    from s2_sink import S2Config, S2Writer
    from s2_sink.encoders import InsertEncoder
    from tests.integration.conftest import connect_session

    spark = connect_session()
    out: dict[str, Any] = {"session": type(spark).__module__, "runs": []}
    src = work / "landing"
    src.mkdir()
    cfg = S2Config(
        basin=basin,
        stream="orders",
        access_token="test",
        account_endpoint=endpoint,
        basin_endpoint=endpoint,
        batch_max_records=100,
    )
    for run in range(RUNS):
        _land_file(src, run)
        plan.write_text(json.dumps({"rules": [CRASH] if run == CRASHED_RUN else []}))
        started = time.monotonic()
        # Under Connect the query id cannot be read where foreachBatch runs: the job names its writer.
        writer = S2Writer(cfg, InsertEncoder(), writer_id="nightly-orders")
        query = (
            spark.readStream.schema(SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(src))
            .writeStream.foreachBatch(writer)
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        error = None
        try:
            query.awaitTermination(300)
            exc = query.exception()
            error = None if exc is None else str(exc)[:1000]
        except Exception as exc:  # noqa: BLE001 - a failed run is recorded, and the schedule goes on
            error = str(exc)[:1000]
        if query.isActive:
            query.stop()
            error = error or "the availableNow run did not finish within 300 s"
        out["runs"].append(
            {"error": error, "batches": _batch_ids(query), "seconds": round(time.monotonic() - started, 1)}
        )
    out["crash_fired"] = Path(f"{plan}.fired.0.0").exists()
    spark.stop()
    return out


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:4])))
