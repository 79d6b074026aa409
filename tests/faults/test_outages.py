"""S2 outages under running queries: the lite server runs in its own process over a data directory, is
SIGKILLed at a named point of the write (or at any moment of a read) and started again on the same port and
directory some seconds later, as a failover looks from a client. Writers and readers wait for it up to the
delivery deadline (``s2.delivery-timeout-ms``) and lose or duplicate nothing; past the deadline the query
fails with the error in words, naming the option, and a restart is exactly-once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from s2_sdk import AppendInput, Record

from tests.faults._harness import ROOT, run_scenario
from tests.faults._outages import Outages, durable_server, server_pid_file, task_attempts
from tests.faults._support import client, make_basin, run

pytestmark = [pytest.mark.faults, pytest.mark.spark]

# Appends in flight when the server dies (their outcome unknown), then the driver's ledger commit.
IN_FLIGHT = {"point": "mid_session", "batch": 1, "partition": 0, "chunk": 1, "action": "kill_server"}
AT_COMMIT = {"point": "after_tasks_before_commit", "batch": 2, "action": "kill_server"}


def basin_of(tmp: Path) -> str:
    """The basin of the scenario run in `tmp`."""
    return str(json.loads((tmp / "scenario.json").read_text())["basin"])


def _logs(tmp: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in sorted(tmp.glob("driver-*.log")))


@pytest.mark.timeout(600)
def test_writer_rides_out_a_30s_outage_exactly_once(tmp: Path) -> None:
    """S2Writer: the server dies while a task's appends are in flight (30 s down), and again when the driver
    is about to append a batch's ledger commit (8 s down). The query stays up, and every row is in the
    stream exactly once: a task whose appends' outcome is unknown fails, and its retry waits for S2 and reads
    back what landed (one extra attempt of that task, not Spark's four); everything else retries in place."""
    with durable_server(tmp) as srv, Outages(srv, server_pid_file(tmp), down_s=[30.0, 8.0]) as outages:
        out = run_scenario(
            tmp,
            srv.endpoint,
            files=3,
            rows=150,
            rules=[IN_FLIGHT, AT_COMMIT],
            batch_max_records=10,
            timeout=480,  # the harness's 240 s per run, and the outages' 38 s on a loaded machine
        )
        attempts = task_attempts(srv.endpoint, basin_of(tmp))
    retried = {k: n for k, n in attempts.items() if n > 1}
    print(out.summary(), "outages:", [round(b - a, 1) for a, b in outages.spans], "retried tasks:", retried)
    # The outage costs a task whose appends were in flight one attempt, not Spark's four.
    assert retried, attempts
    assert {batch for batch, _ in retried} == {1}, attempts
    assert set(retried.values()) == {2}, attempts
    assert out.fired == 2
    assert len(outages.spans) == 2
    assert out.exits == [0], _logs(tmp)[-4000:]
    assert out.exactly_once(), out.summary()
    logs = _logs(tmp)
    assert "waiting for S2" in logs
    assert "S2 answers again" in logs


@pytest.mark.timeout(600)
def test_format_sink_rides_out_an_outage_exactly_once(tmp: Path) -> None:
    """writeStream.format("s2"): the server dies when the sink is about to commit micro-batch 1 to the
    ledger and comes back 10 s later (before, a ledger read gave up within about 2 s); the commit waits,
    the next micro-batch is planned once the server is back, and every row is written once."""
    with durable_server(tmp) as srv, Outages(srv, server_pid_file(tmp), down_s=[10.0]) as outages:
        out = run_scenario(
            tmp, srv.endpoint, sink="format", files=2, rows=150, rules=[AT_COMMIT | {"batch": 1}]
        )
    print(out.summary(), "outages:", [round(b - a, 1) for a, b in outages.spans])
    assert out.fired == 1
    assert out.exits == [0], _logs(tmp)[-4000:]
    assert out.exactly_once(), out.summary()


@pytest.mark.timeout(600)
def test_past_the_deadline_the_query_fails_in_words_and_a_restart_is_exactly_once(tmp: Path) -> None:
    """With s2.delivery-timeout-ms=5000 and the server down for 12 s from the driver's ledger commit of batch
    1, the query fails with the error in words naming the option to raise; restarted once the server is back,
    it replays batch 1 and every row is in the stream exactly once."""
    rule = AT_COMMIT | {"batch": 1}
    with durable_server(tmp) as srv, Outages(srv, server_pid_file(tmp), down_s=[12.0]) as outages:
        out = run_scenario(
            tmp,
            srv.endpoint,
            files=2,
            rows=150,
            rules=[rule],
            delivery_timeout_ms=5000,
            faults=lambda n: outages.wait_up() if n else None,  # restart the query once S2 is back
            max_runs=2,
        )
    print(out.summary())
    first = (tmp / "driver-0.log").read_text(errors="replace")
    assert out.exits[0] not in (0, -9), first[-4000:]
    assert out.exits[1:] == [0]
    assert "CommitError" in first
    assert "cannot reach S2 at" in first
    assert "s2.delivery-timeout-ms" in first
    assert out.exactly_once(), out.summary()


@pytest.mark.timeout(600)
def test_streaming_read_continues_across_a_server_restart(tmp: Path) -> None:
    """readStream.format("s2") reading 300 records per micro-batch: the server is killed after the reader has
    read some, stays down 10 s, and comes back with more records appended; the query keeps going and reads
    every record exactly once."""

    def append(endpoint: str, basin: str, ids: range) -> None:
        async def go() -> None:
            async with client(endpoint) as s2:
                stream = s2.basin(basin).stream("events")
                for lo in range(ids.start, ids.stop, 500):
                    records = [
                        Record(json.dumps({"id": i}).encode()) for i in range(lo, min(lo + 500, ids.stop))
                    ]
                    await stream.append(AppendInput(records=records))

        run(go())

    out = tmp / "read-ids.txt"
    with durable_server(tmp) as srv, Outages(srv, server_pid_file(tmp), down_s=[10.0]) as outages:
        basin = make_basin(srv.endpoint, ["events"])
        append(srv.endpoint, basin, range(2000))
        scn = {
            "endpoint": srv.endpoint,
            "basin": basin,
            "stream": "events",
            "out": str(out),
            "checkpoint": str(tmp / "checkpoint"),
            "expect": 2600,
        }
        (tmp / "reader.json").write_text(json.dumps(scn))
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}
        with (tmp / "driver-0.log").open("w") as log:
            reader = subprocess.Popen(
                [sys.executable, "-m", "tests.faults._reader", str(tmp / "reader.json")],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + 300
                while not (out.exists() and len(out.read_text().split()) >= 600):
                    assert reader.poll() is None, _logs(tmp)[-4000:]
                    assert time.monotonic() < deadline, "the reader read nothing"
                    time.sleep(0.2)
                outages.kill()
                outages.wait_up()
                append(srv.endpoint, basin, range(2000, 2600))
                code = reader.wait(timeout=300)
            finally:
                if reader.poll() is None:
                    reader.kill()
    ids = Counter(int(line) for line in out.read_text().split())
    print(f"read {sum(ids.values())} records, outages: {[round(b - a, 1) for a, b in outages.spans]}")
    assert code == 0, _logs(tmp)[-4000:]
    assert ids == Counter(range(2600))
