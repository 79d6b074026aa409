"""Named crash points for the fault-injection suite. Inert unless ``S2SINK_CRASH_PLAN`` names a file.

The plan file is JSON: a list of rules ``{"point": "...", "batch": 3, "partition": 0, "chunk": 1,
"attempt": 0, "action": "exit"|"kill_driver"|"kill_driver_jvm"|"kill_server", "times": 1}``; omitted keys
match anything (``attempt`` defaults to 0 so a retried task does not crash again). When a rule matches, the
process dies for real: ``exit`` is ``os._exit(137)`` (an executor Python worker, or the driver),
``kill_driver`` sends SIGKILL to the pid in the plan's ``driver_pid`` file (the calling worker goes on, a
zombie), ``kill_driver_jvm`` also to the one in its ``jvm_pid`` file and then exits the calling process:
the whole local-mode application at once, so no task the JVM had queued starts and a sink commit running
in a Python worker stops right there. ``kill_server`` sends SIGKILL to the pid in its ``server_pid`` file
(a lite server in its own process: an S2 outage that starts at this very point) and the caller goes on.
Each rule fires at most ``times`` times across all processes (marker files next to the plan, created
atomically).

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


def _rules() -> list[dict[str, Any]]:
    global _cache  # noqa: PLW0603 - a per-process cache of the plan file
    assert _PLAN_PATH is not None
    try:
        mtime = os.stat(_PLAN_PATH).st_mtime
    except OSError:
        return []
    if _cache is None or _cache[0] != mtime:
        with open(_PLAN_PATH, encoding="utf-8") as fh:
            doc = json.load(fh)
        _cache = (mtime, list(doc.get("rules", [])))
    return _cache[1]


def hit(point: str, **where: int) -> None:
    """Die here if the crash plan says so (no-op without a plan)."""
    if _PLAN_PATH is None:
        return
    for i, rule in enumerate(_rules()):
        if rule.get("point") != point:
            continue
        # A rule without "attempt" matches only first attempts, so a retried task does not crash again.
        wanted = {"attempt": 0, **{k: v for k, v in rule.items() if k in where}}
        if any(k in where and where[k] != v for k, v in wanted.items()):
            continue
        if not _claim(i, int(rule.get("times", 1))):
            continue
        _die(str(rule.get("action", "exit")))


def _claim(index: int, times: int) -> bool:
    for n in range(times):
        marker = f"{_PLAN_PATH}.fired.{index}.{n}"
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        return True
    return False


def _die(action: str) -> None:
    if action == "kill_server":
        assert _PLAN_PATH is not None
        with open(_PLAN_PATH + ".server_pid", encoding="utf-8") as fh:
            os.kill(int(fh.read().strip()), signal.SIGKILL)
        return
    if action in ("kill_driver", "kill_driver_jvm"):
        assert _PLAN_PATH is not None
        suffixes = (".driver_pid", ".jvm_pid") if action == "kill_driver_jvm" else (".driver_pid",)
        for suffix in suffixes:
            with open(_PLAN_PATH + suffix, encoding="utf-8") as fh:
                os.kill(int(fh.read().strip()), signal.SIGKILL)
        if action == "kill_driver":
            return
    os._exit(137)
