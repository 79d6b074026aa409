"""Named crash points for the fault-injection suite. Inert unless ``S2SINK_CRASH_PLAN`` names a file.

The plan file is JSON: ``{"rules": [...]}``, each rule ``{"point": "...", "batch": 3, "partition": 0, "chunk":
1, "attempt": 0, "action": ..., "times": 1}``; omitted keys match anything (``attempt`` defaults to 0 so a
retried task does not crash again). A matching rule kills for real: ``exit`` is ``os._exit(137)``;
``kill_driver`` sends SIGKILL to the pid in the plan's ``.driver_pid`` file (the caller goes on, a zombie);
``kill_driver_jvm`` also to the one in ``.jvm_pid``, then exits: the whole local-mode application at once, so
no queued task starts and a sink commit in a Python worker stops right there; ``kill_server`` kills the pid
in ``.server_pid`` (a lite server: an S2 outage that starts at this very point) and the caller goes on. Each
rule fires at most ``times`` times across all processes (marker files next to the plan, created atomically).

Points: ``task_start``, ``before_append``, ``mid_session``, ``after_append_before_ack``,
``after_ack_before_task_end`` (executors); ``after_tasks_before_commit``,
``after_commit_before_spark_commit`` (driver).
"""

from __future__ import annotations

import json
import os
import signal
from typing import Any, Final

__all__ = ["ENV_VAR", "hit"]

ENV_VAR: Final = "S2SINK_CRASH_PLAN"

_PLAN_PATH: Final = os.environ.get(ENV_VAR) or None
_cache: tuple[float, list[dict[str, Any]]] | None = None

# action -> (the pid files whose processes are killed, whether the calling process exits too)
_ACTIONS: Final = {
    "exit": ((), True),
    "kill_driver": ((".driver_pid",), False),
    "kill_driver_jvm": ((".driver_pid", ".jvm_pid"), True),
    "kill_server": ((".server_pid",), False),
}


def _rules(path: str) -> list[dict[str, Any]]:
    global _cache  # noqa: PLW0603 - a per-process cache of the plan file
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return []
    if _cache is None or _cache[0] != mtime:
        with open(path, encoding="utf-8") as fh:
            _cache = (mtime, list(json.load(fh).get("rules", [])))
    return _cache[1]


def hit(point: str, **where: int) -> None:
    """Die here if the crash plan says so (no-op without a plan)."""
    if _PLAN_PATH is None:
        return
    for i, rule in enumerate(_rules(_PLAN_PATH)):
        wanted = {"attempt": 0, **{k: v for k, v in rule.items() if k in where}}
        if rule.get("point") != point or any(k in where and where[k] != v for k, v in wanted.items()):
            continue
        if _claim(f"{_PLAN_PATH}.fired.{i}", int(rule.get("times", 1))):
            pid_files, exits = _ACTIONS.get(str(rule.get("action")), _ACTIONS["exit"])
            for suffix in pid_files:
                with open(_PLAN_PATH + suffix, encoding="utf-8") as fh:
                    os.kill(int(fh.read().strip()), signal.SIGKILL)
            if exits:
                os._exit(137)


def _claim(marker: str, times: int) -> bool:
    for n in range(times):
        try:
            fd = os.open(f"{marker}.{n}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False
