"""Exactly-once soak: ``python -m tests.faults.soak [--batches 50] [--seed N] [--delivery exactly-once]``.

One streaming query over >= 50 micro-batches against a lite server, with random faults throughout:
executor Python workers killed at random crash points, the driver SIGKILLed at random points and
restarted from its checkpoint (with a different input split), and server faults (503s, dropped
connections before or after an append is applied, slow acks) armed every second. At the end the target
streams are read back; it prints the faults injected, rows expected, rows found, duplicates and losses,
and exits 1 unless duplicates and losses are both zero (for ``--delivery exactly-once``).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from s2_sink.lite import LiteServer
from tests.faults._harness import run_scenario
from tests.faults.test_exactly_once_faults import _FaultStorm

EXECUTOR_POINTS = ["before_append", "mid_session", "after_append_before_ack", "after_ack_before_task_end"]
DRIVER_POINTS = ["after_tasks_before_commit", "after_commit_before_spark_commit"]


def crash_plan(
    rng: random.Random, batches: int, executor_crashes: int, driver_kills: int
) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for _ in range(executor_crashes):
        rule: dict[str, Any] = {
            "point": rng.choice(EXECUTOR_POINTS),
            "batch": rng.randrange(batches),
            "partition": rng.randrange(2),
        }
        if rule["point"] != "after_ack_before_task_end":
            rule["chunk"] = rng.randrange(2)
        rules.append(rule)
    kill_batches = rng.sample(range(1, batches - 1), driver_kills)
    for i, batch in enumerate(sorted(kill_batches)):
        if i % 2 == 0:
            point = rng.choice(DRIVER_POINTS)
            rules.append({"point": point, "batch": batch, "action": "kill_driver"})
        else:  # mid-batch, from an executor, while appends are in flight
            rules.append(
                {"point": "mid_session", "batch": batch, "partition": 0, "chunk": 0, "action": "kill_driver"}
            )
    return rules


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--rows", type=int, default=40, help="rows per micro-batch")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--executor-crashes", type=int, default=8)
    ap.add_argument("--driver-kills", type=int, default=2)
    ap.add_argument("--delivery", default="exactly-once", choices=["exactly-once", "at-least-once"])
    args = ap.parse_args(argv)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    rules = crash_plan(rng, args.batches, args.executor_crashes, args.driver_kills)
    print(f"soak: seed={seed} batches={args.batches} rows/batch={args.rows} delivery={args.delivery}")
    for rule in rules:
        print(f"  crash rule: {rule}")
    started = time.monotonic()
    with (
        LiteServer(subprocess=True, faults=True) as srv,
        tempfile.TemporaryDirectory(prefix="s2soak-") as tmp,
    ):
        with _FaultStorm(srv, seed=seed, period=1.5) as storm:
            out = run_scenario(
                Path(tmp),
                srv.endpoint,
                delivery=args.delivery,
                encoder=rng.choice(["insert", "upsert"]),
                shards=rng.choice([None, 2]),
                files=args.batches,
                rows=args.rows,
                rules=rules,
                restart_overrides={"max_partition_bytes": 900},
                max_runs=args.driver_kills + 3,
                timeout=1800,
                batch_max_records=10,
                shuffle_partitions=2,
            )
        counters = srv.faults.counters()
    kinds = {k: storm.armed.count(k) for k in sorted(set(storm.armed))}
    print(
        f"faults injected: crash points fired={out.fired} driver exits={out.exits} "
        f"server faults armed={kinds}"
    )
    print(f"  server fault counters: {counters}")
    print(f"rows expected: {sum(out.expected.values())}")
    print(f"rows found:    {sum(out.found.values())}")
    print(f"duplicates:    {out.duplicates}")
    print(f"losses:        {out.missing}")
    print(f"elapsed:       {time.monotonic() - started:.0f}s")
    ok = out.duplicates == 0 and out.missing == 0 and out.unexpected == 0 and out.exits[-1:] == [0]
    if args.delivery == "exactly-once":
        print("RESULT:", "PASS (exactly once)" if ok else "FAIL")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
