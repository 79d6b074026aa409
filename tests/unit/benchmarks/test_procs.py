"""The harness's process meter counts a case's Python CPU also when a process that predates the case exits
during it (a worker or daemon Spark stops when idle): its CPU before the case stays out, its CPU during the
case stays in."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from benchmarks._procs import ProcessMeter

_BURN = (
    "import sys, time\n"
    "def burn(s):\n"
    "    t = time.process_time()\n"
    "    while time.process_time() - t < s: pass\n"
    "burn(float(sys.argv[1]))\n"
    "sys.stdout.write('ready\\n'); sys.stdout.flush()\n"
    "sys.stdin.readline()\n"
    "burn(float(sys.argv[2]))\n"
)


def test_a_process_that_exits_mid_case_counts_only_its_cpu_during_the_case() -> None:
    """A child Python process (below the meter's root, as workers are below the JVM) burns 0.8 s of CPU
    before the case starts, 0.5 s during it, and exits before it ends: the case counts about 0.5 s (the
    sampler may miss its last 0.2 s), neither a negative nor 1.3 s."""
    child = subprocess.Popen(
        [sys.executable, "-c", _BURN, "0.8", "0.5"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdin is not None
        assert child.stdout.readline() == "ready\n"
        meter = ProcessMeter(os.getpid(), None)
        meter.start()
        child.stdin.write("go\n")
        child.stdin.flush()
        child.wait(timeout=60)
        time.sleep(0.3)
        usage = meter.stop()
    finally:
        child.kill()
    assert 0.3 <= usage.worker_cpu_s <= 0.8, usage
