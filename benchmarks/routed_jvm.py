"""Where a routed micro-batch's client CPU goes beyond one stream's, by JVM thread, over many micro-batches.

    python -m benchmarks.routed_jvm [--batches 24] [--rows 100000] [--streams 1000]
        [--delivery at-least-once|exactly-once]

The ``routed`` section of ``benchmarks.run`` sums three micro-batches after a first: it cannot tell the rows'
cost from the JVM still compiling (its JIT compiler threads), nor show how either changes as a query runs on.
This writes the section's rows (the same frames and writers, `benchmarks._routed`) into one stream and routed
to ``--streams`` streams, alternating one micro-batch each (ABAB), ``--batches`` of each after an untimed
first, and splits each micro-batch's client CPU into the Python workers, the Python driver, the JVM's JIT
compiler threads, its task threads (Spark's ``Executor task launch worker``: the stages' rows, a shuffle's
writes included) and the rest (the Python runners' writer threads, which read a shuffle, the scheduler,
GC, ...), from ``/proc`` per thread. Printed per window of micro-batches (the first three, as
``benchmarks.run`` measures them, the whole run, its second half): microseconds per row and the routed/one
ratio of client CPU, with and without the JIT compiler's share. The last output line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import uuid
from collections import Counter
from typing import Any

from benchmarks import _s2
from benchmarks._cases import Ctx
from benchmarks._data import dataset
from benchmarks._lite import lite_process
from benchmarks._procs import ProcessMeter
from benchmarks._routed import _frame, _writer
from benchmarks.run import _spark

__all__ = ["main"]

_GROUPS = (("jit", re.compile(r"^C\d CompilerThre")), ("tasks", re.compile(r"^Executor task")))
_PARTS = ("workers", "driver", "jit", "tasks", "other")


def _jvm_threads(pid: int) -> Counter[str]:
    """CPU seconds of the JVM's threads so far, by group (`_GROUPS`, else ``other``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: Counter[str] = Counter()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except OSError:  # the thread ended meanwhile
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        group = next((g for g, pattern in _GROUPS if pattern.match(name)), "other")
        out[group] += (int(fields[11]) + int(fields[12])) / tick
    return out


def _window(runs: list[dict[str, float]], rows: int) -> dict[str, float]:
    return {part: sum(r[part] for r in runs) / len(runs) / rows * 1e6 for part in _PARTS}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=24, help="measured micro-batches per writer")
    p.add_argument("--rows", type=int, default=100_000, help="rows per micro-batch")
    p.add_argument("--streams", type=int, default=1000, help="streams the routed writer routes to")
    p.add_argument("--delivery", default="at-least-once", choices=("at-least-once", "exactly-once"))
    args = p.parse_args()
    spark = _spark()
    jvm = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    runs: dict[str, list[dict[str, float]]] = {"one": [], "routed": []}
    with lite_process() as lite:
        basin = f"bench-{uuid.uuid4().hex[:12]}"
        _s2.ensure(lite.endpoint, basin, [])
        ctx = Ctx(spark=spark, df=None, rows=args.rows, endpoint=lite.endpoint, basin=basin, tmp="")  # type: ignore[arg-type]
        meter = ProcessMeter(jvm, lite.pid)
        base = dataset(spark, args.rows, 2).cache()
        base.count()
        writers, frames = {}, {}
        for key in runs:
            prefix = f"j{uuid.uuid4().hex[:6]}-"
            writers[key] = _writer(ctx, key, args.delivery, prefix)
            frames[key] = _frame(base, key, prefix, args.streams).cache()
            frames[key].count()
            writers[key](frames[key], 0)  # creates the streams (and opens the run), untimed
        for i in range(args.batches):
            for key in ("one", "routed") if i % 2 == 0 else ("routed", "one"):
                before = _jvm_threads(jvm)
                meter.start()
                writers[key](frames[key], i + 1)
                used = meter.stop()
                grew = _jvm_threads(jvm) - before
                jit, tasks = grew["jit"], grew["tasks"]
                other = used.jvm_cpu_s - jit - tasks
                python = {"workers": used.worker_cpu_s, "driver": used.driver_cpu_s}
                runs[key].append({**python, "jit": jit, "tasks": tasks, "other": other})
    windows = {"first 3": (0, 3), "all": (0, args.batches), "second half": (args.batches // 2, args.batches)}
    report: dict[str, Any] = {"args": vars(args), "windows": {}}
    for label, (lo, hi) in windows.items():
        one, many = (_window(runs[k][lo:hi], args.rows) for k in ("one", "routed"))
        client = {k: sum(v.values()) for k, v in (("one", one), ("routed", many))}
        ratio = client["routed"] / client["one"]
        no_jit = (client["routed"] - many["jit"]) / (client["one"] - one["jit"])
        report["windows"][label] = {"one": one, "routed": many, "ratio": ratio, "ratio_without_jit": no_jit}
        shown = " | ".join(
            f"{k} " + " ".join(f"{part} {v[part]:.2f}" for part in _PARTS)
            for k, v in (("one", one), ("routed", many))
        )
        print(f"batches {lo + 1}-{hi} (us/row): {shown} | ratio {ratio:.2f}, without jit {no_jit:.2f}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
