"""A write task freezes its Python worker's objects once, in Spark workers only (never a driver's)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest
from pyspark import TaskContext

from s2_sink._write.task import worker_gc
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.lite import LiteServer
from tests.unit.write.test_partition_writer import config, frame

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


def test_a_write_task_in_a_spark_worker_freezes(
    lite: LiteServer, basin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`write_partition` (every write task's body) freezes as it ends, in a Spark task."""
    monkeypatch.setattr(worker_gc, "_FROZEN", [False])
    # Not ``TaskContext()``: its constructor sets the class attribute itself before monkeypatch saves it, so
    # the context would outlive the test.
    monkeypatch.setattr(TaskContext, "_taskContext", object.__new__(TaskContext))
    plan = WritePlan(cfg=config(lite, basin), batch_id=0, stream="events")
    try:
        write_partition(plan, [frame([b"a"])], PartitionContext(0, 0, 0, 0, 0))
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()  # this test process is no Spark worker
