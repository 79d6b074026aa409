"""Pass-through ``mapInArrow`` steps around the shuffle of a cluster scenario, run inside Spark tasks.

The map-side gate notes which executors hold map (shuffle) output. The write-side gate runs in the task
that then writes the partition: if its executor is the chosen victim, it arms the fault-suite crash plan
(``s2_sink/_crashpoints.py``) so that this very task, after chunk 1 of its partition was
acknowledged by S2, SIGKILLs its own executor JVM and its Python daemon and exits. The crash points' pid
file actions kill whatever pids the plan's ``.driver_pid``/``.jvm_pid`` files name: here the executor's.
Arming at the start of a write task is race-free: every map task has finished by then, and no row of the
partition has reached the writer yet.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from tests.cluster._procs import cmdline, executor_chain

Victim = Literal["map-output-holder", "no-map-output", "none"]


@dataclass(frozen=True)
class Gates:
    """`shared`: a directory all executors see (this machine); `victim`: whose executor to kill."""

    shared: str
    victim: Victim
    plan: str
    point: str = "after_append_before_ack"
    chunk: int = 1

    def map_side(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        jvm, _ = executor_chain()
        open(os.path.join(self.shared, f"map-output-on.{jvm}"), "w").close()
        yield from batches

    def write_side(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        if self.victim != "none":
            self._maybe_arm()
        yield from batches

    def _maybe_arm(self) -> None:
        from pyspark import TaskContext

        jvm, below = executor_chain()
        holds = os.path.exists(os.path.join(self.shared, f"map-output-on.{jvm}"))
        if holds != (self.victim == "map-output-holder"):
            return
        try:
            fd = os.open(os.path.join(self.shared, "armed"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # one fault per scenario
        tc = TaskContext.get()
        assert tc is not None
        found = re.search(r"--executor-id (\S+)", cmdline(jvm))
        armed = {
            "executor_id": found.group(1) if found else "?",
            "executor_pid": jvm,
            "holds_map_output": holds,
            "partition": tc.partitionId(),
            "stage": tc.stageId(),
            # pyspark's TaskContext has no stageAttemptNumber(): the REST evidence tells stage attempts apart.
            "task_attempt": tc.attemptNumber(),
            "task_attempt_id": tc.taskAttemptId(),
        }
        os.write(fd, json.dumps(armed).encode())
        os.close(fd)
        for suffix, pid in ((".driver_pid", jvm), (".jvm_pid", below)):
            with open(self.plan + suffix, "w", encoding="utf-8") as fh:
                fh.write(str(pid))
        rule = {
            "point": self.point,
            "partition": tc.partitionId(),
            "chunk": self.chunk,
            "action": "kill_driver_jvm",
        }
        tmp = self.plan + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"rules": [rule]}, fh)
        os.replace(tmp, self.plan)  # readers see the old plan or the whole new one
