"""Processes of a standalone cluster seen through ``/proc``: executor JVMs, the executor a task runs in, and
everything started under one directory (to stop only what a test started)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"


def cmdline(pid: int) -> str:
    """The command line of `pid` with spaces between arguments ('' when it is gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def parent(pid: int) -> int:
    """The parent pid of `pid` (0 when it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    # The command name in parentheses may hold spaces: the fields after its closing parenthesis are fixed.
    return int(stat.rsplit(")", 1)[1].split()[1])


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for its parent counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def executor_pids(app_id: str) -> list[int]:
    """The executor JVMs of application `app_id` (``CoarseGrainedExecutorBackend ... --app-id <id>``)."""
    return sorted(
        pid for pid in _pids() if EXECUTOR_MAIN in (line := cmdline(pid)) and f"--app-id {app_id}" in line
    )


def executor_chain() -> tuple[int, int]:
    """From inside a Spark task's Python worker: (the executor JVM, the worker's parent below it).

    The parent is pyspark's worker daemon (the worker's fork server), or the JVM itself without one.
    """
    child, pid = os.getpid(), parent(os.getpid())
    while pid > 1:
        if EXECUTOR_MAIN in cmdline(pid):
            return pid, child
        child, pid = pid, parent(pid)
    raise RuntimeError(f"process {os.getpid()} does not run under a Spark executor JVM")


def started_under(directory: Path) -> list[int]:
    """Processes whose command line or working directory lies under `directory` (ours, whoever the parent)."""
    mark = str(directory)
    found = []
    ours = _ancestors()
    for pid in _pids():
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            cwd = ""
        if pid not in ours and (mark in cmdline(pid) or cwd.startswith(mark)):
            found.append(pid)
    return found


def _ancestors() -> set[int]:
    """This process and its ancestors: never ours to stop."""
    chain, pid = set(), os.getpid()
    while pid > 1:
        chain.add(pid)
        pid = parent(pid)
    return chain


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (started with ``start_new_session=True``), if any is left."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return
