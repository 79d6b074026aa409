"""A write task freezes its Python worker's objects once, in Spark workers only (never a driver's)."""

from __future__ import annotations

import json
import subprocess
import sys

# Each case runs in a process of its own: a freeze is for the life of a process.
_PROBE = """
import gc, json, sys
from pyspark import TaskContext
from s2_sink._write.task.worker_gc import freeze_imports
if sys.argv[1] == "task":
    TaskContext._getOrCreate()  # what PySpark's worker sets up before running a task
freeze_imports()
first = gc.get_freeze_count()
later = [object() for _ in range(10)], [[] for _ in range(10)]
freeze_imports()
print(json.dumps({"first": first, "second": gc.get_freeze_count()}))
"""


def _freeze_counts(where: str) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", _PROBE, where], capture_output=True, text=True, check=True)
    counts: dict[str, int] = json.loads(out.stdout)
    return counts


def test_a_spark_worker_freezes_what_it_imported_once() -> None:
    counts = _freeze_counts("task")
    assert counts["first"] > 1000  # the modules' objects: pyspark, pyarrow, this package
    assert counts["second"] == counts["first"]  # objects made after the first task stay collectable


def test_a_driver_freezes_nothing() -> None:
    assert _freeze_counts("driver") == {"first": 0, "second": 0}
