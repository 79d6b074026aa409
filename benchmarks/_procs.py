"""CPU time and peak memory of the processes a benchmark case runs in, read from /proc (Linux only).

What is measured, and why it is honest:

* Python worker CPU: per Python process below the Spark JVM (the ``pyspark.daemon`` processes and the workers
  they fork), its own ``utime + stime`` when the case starts (0 for a process born during it) and when last
  seen: at the end, or by the sampler thread (every 200 ms) before it exited. The case's value is the sum of
  those differences. (Summing ``cutime`` of the daemons instead loses the whole history of a process that
  exits during a case, a daemon or a worker Spark stops when idle, whose CPU then leaves the sum: cases
  measured right after a ``format("s2")`` one read as using almost no Python CPU.) A worker born and gone
  between two samples is missed; write tasks live for seconds.
* Driver CPU: ``utime + stime`` of this process (all threads) minus the CPU of our own sampler thread. The
  JVM is a child of the driver but lives for the whole run, so the driver's children counters stay out.
* JVM and lite-server CPU: ``utime + stime`` of those processes (all their threads).
* Peak RSS: the kernel's high-water mark ``VmHWM``, reset at the start of each case by writing ``5`` to
  ``/proc/<pid>/clear_refs``; a sampler thread reads it every 200 ms from every Python process below the
  JVM (so a worker that exits mid-case is still seen) and once more at the end.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

__all__ = ["CaseUsage", "ProcessMeter"]

_TICKS = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            raw = fh.read()
    except OSError:
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    return raw.rsplit(")", 1)[1].split()


def _cpu_seconds(pid: int, *, children: bool) -> float:
    f = _stat_fields(pid)
    if f is None:
        return 0.0
    # After the ')' split: f[0] is state, so utime/stime/cutime/cstime (fields 14-17) sit at f[11..14].
    ticks = int(f[11]) + int(f[12])
    if children:
        ticks += int(f[13]) + int(f[14])
    return ticks / _TICKS


def _own_cpu(pid: int) -> tuple[tuple[int, int], float] | None:
    """((pid, start time), own CPU seconds) of a live process: the key tells a reused pid apart."""
    f = _stat_fields(pid)
    if f is None:
        return None
    # After the ')' split, starttime (field 22) sits at f[19].
    return (pid, int(f[19])), (int(f[11]) + int(f[12])) / _TICKS


def _ppid(pid: int) -> int | None:
    f = _stat_fields(pid)
    return None if f is None else int(f[1])


def _is_python(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv0 = fh.read().split(b"\0", 1)[0]
    except OSError:
        return False
    return b"python" in os.path.basename(argv0)


def _descendants(root: int) -> list[int]:
    parent: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            pp = _ppid(int(name))
            if pp is not None:
                parent[int(name)] = pp
    found: list[int] = []
    frontier = {root}
    while frontier:
        nxt = {pid for pid, pp in parent.items() if pp in frontier}
        found.extend(nxt)
        frontier = nxt
    return found


def _status_kib(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _reset_hwm(pid: int) -> None:
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass  # not ours or gone: its HWM then covers its whole life, which only overstates the peak


@dataclass(frozen=True)
class CaseUsage:
    """Resources one case used."""

    wall_s: float
    worker_cpu_s: float
    driver_cpu_s: float
    jvm_cpu_s: float
    lite_cpu_s: float
    worker_peak_rss_mib: float
    driver_peak_rss_mib: float


class ProcessMeter:
    """Measures one case at a time: ``start()``, run the case, ``stop()`` -> CaseUsage."""

    def __init__(self, jvm_pid: int, lite_pid: int | None) -> None:
        self._jvm = jvm_pid
        self._lite = lite_pid
        self._me = os.getpid()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._peak_kib = 0
        self._sampler_cpu = 0.0
        self._first: dict[tuple[int, int], float] = {}
        self._last: dict[tuple[int, int], float] = {}

    def python_workers(self) -> list[int]:
        return [p for p in _descendants(self._jvm) if _is_python(p)]

    def total_cpu(self) -> float:
        """CPU seconds of the JVM, the Python workers, the driver and the lite server since they started."""
        return (
            self._worker_cpu()
            + _cpu_seconds(self._jvm, children=False)
            + _cpu_seconds(self._me, children=False)
            + (_cpu_seconds(self._lite, children=True) if self._lite else 0.0)
        )

    def _worker_cpu(self) -> float:
        return sum(_cpu_seconds(p, children=True) for p in self.python_workers())

    def _sample(self) -> None:
        t0 = time.thread_time()
        while not self._stop.wait(0.2):
            self._scan()
        self._sampler_cpu = time.thread_time() - t0

    def _scan(self) -> None:
        for pid in self.python_workers():
            self._peak_kib = max(self._peak_kib, _status_kib(pid, "VmHWM"))
            seen = _own_cpu(pid)
            if seen is not None:
                self._last[seen[0]] = seen[1]

    def _case_worker_cpu(self) -> float:
        return sum(cpu - self._first.get(key, 0.0) for key, cpu in self._last.items())

    def start(self) -> None:
        for pid in [*self.python_workers(), self._me]:
            _reset_hwm(pid)
        self._peak_kib = 0
        self._stop.clear()
        self._last = {}
        self._scan()
        self._first = dict(self._last)
        self._c0 = (
            0.0,
            _cpu_seconds(self._me, children=False),
            _cpu_seconds(self._jvm, children=False),
            _cpu_seconds(self._lite, children=True) if self._lite else 0.0,
        )
        self._thread = threading.Thread(target=self._sample, name="bench-meter", daemon=True)
        self._thread.start()
        self._t0 = time.perf_counter()

    def stop(self) -> CaseUsage:
        wall = time.perf_counter() - self._t0
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self._scan()
        c1 = (
            self._case_worker_cpu(),
            _cpu_seconds(self._me, children=False),
            _cpu_seconds(self._jvm, children=False),
            _cpu_seconds(self._lite, children=True) if self._lite else 0.0,
        )
        return CaseUsage(
            wall_s=wall,
            worker_cpu_s=c1[0] - self._c0[0],
            driver_cpu_s=max(0.0, c1[1] - self._c0[1] - self._sampler_cpu),
            jvm_cpu_s=c1[2] - self._c0[2],
            lite_cpu_s=c1[3] - self._c0[3],
            worker_peak_rss_mib=self._peak_kib / 1024,
            driver_peak_rss_mib=_status_kib(self._me, "VmHWM") / 1024,
        )
