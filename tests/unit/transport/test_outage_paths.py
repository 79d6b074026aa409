"""Calls that meet an S2 outage (no Spark): a lite server over a data directory is stopped and started again
on the same port a few seconds later, while a task's appends, the driver's ledger and a reader's planning
run. Each waits for it, logs the outage once when it starts and once when it ends, and goes on; past the
delivery deadline each fails with the words naming the option."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from s2_sink._exactly_once.ledger import Ledger
from s2_sink._read.planning import lookups as _lookups
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.preflight import preflight_write
from s2_sink._transport.runtime import get_pool
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import WritePlan
from s2_sink.config import S2Config
from s2_sink.errors import PreflightError, WriteError
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.integration._s2read import read_stream
from tests.unit.write.test_partition_writer import config, ctx, frame

DOWN_S = 3.0


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiteServer]:
    """A durable lite server of this test's own (it is stopped and started again on its port)."""
    srv = LiteServer(data_dir=tmp_path / "lite").start()
    try:
        yield srv
    finally:
        srv.stop()


def _cfg(srv: LiteServer, basin: str, **kw: Any) -> S2Config:
    return config(srv, basin, retry_delay_ms=20, **kw)


def _back_after(srv: LiteServer, seconds: float) -> threading.Thread:
    """Start `srv` again on its port and data directory `seconds` from now (it is stopped now)."""
    srv.stop()

    def back() -> None:
        time.sleep(seconds)
        srv.start()

    thread = threading.Thread(target=back, daemon=True)
    thread.start()
    return thread


def _outage_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and r.getMessage().startswith(("waiting for S2", "S2 answers again"))
    ]


@pytest.mark.waits  # rides out an outage of the server
def test_an_exactly_once_task_waits_for_s2_and_writes_everything_once(
    server: LiteServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A task (appends that must not be re-sent when their outcome is unknown) starts while S2 is down: a
    refused connection applied nothing, so the appender opens its session again until S2 is back (3 s), and
    every record lands once; the outage is logged once when it starts and once when it ends."""
    basin = fresh_basin(server.endpoint)
    cfg = _cfg(server, basin)
    plan = WritePlan(cfg=cfg, batch_id=3, stream="events", resend_ambiguous=False)
    bodies = [str(i).encode() for i in range(3000)]
    back = _back_after(server, DOWN_S)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="s2_sink"):
        write_partition(plan, [frame(bodies)], ctx(3, 1))
    back.join()
    assert time.monotonic() - started >= DOWN_S
    assert [r.body for r in read_stream(server.endpoint, basin, "events")] == bodies
    lines = _outage_lines(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith("waiting for S2: appending to stream 'events' (batch 3, partition 1) failed: ")
    assert "connection refused" in lines[0]
    assert lines[1].startswith("S2 answers again: appending to stream 'events' (batch 3, partition 1)")


@pytest.mark.parametrize("fault", ["dropped after applying", "503 unavailable"])
def test_an_exactly_once_task_fails_at_once_over_appends_that_may_have_landed(fault: str) -> None:
    """Appends caught by a connection dropped after the server applied them, or refused with 503
    ``unavailable`` (which S2 does not promise applied nothing), are not re-sent by an exactly-once task,
    however long the deadline: the task fails at once, naming why, and Spark's retry reads back."""
    with LiteServer(faults=True) as srv:
        basin = fresh_basin(srv.endpoint)
        plan = WritePlan(cfg=_cfg(srv, basin), batch_id=3, stream="events", resend_ambiguous=False)
        if fault == "503 unavailable":
            srv.faults.fail_next_appends(1, status=503)
        else:
            srv.faults.drop_connections(after_appends=1, ambiguous=True)
        started = time.monotonic()
        with pytest.raises(
            WriteError, match="possibly applied appends are not re-sent in this delivery mode"
        ):
            write_partition(plan, [frame([str(i).encode() for i in range(3000)])], ctx(3, 1))
    assert time.monotonic() - started < 10.0


@pytest.mark.waits  # rides out an outage of the server
def test_past_the_deadline_a_task_fails_naming_the_option(server: LiteServer) -> None:
    """With s2.delivery-timeout-ms=1000 and S2 down for 3 s, the task fails after about a second with the
    words of a refused connection and the option to raise."""
    basin = fresh_basin(server.endpoint)
    cfg = _cfg(server, basin, delivery_timeout_ms=1000)
    plan = WritePlan(cfg=cfg, batch_id=3, stream="events", resend_ambiguous=False)
    back = _back_after(server, DOWN_S)
    started = time.monotonic()
    with pytest.raises(WriteError) as failed:
        write_partition(plan, [frame([b"x"])], ctx(3, 1))
    took = time.monotonic() - started
    back.join()
    assert 1.0 <= took < DOWN_S
    words = str(failed.value)
    assert f"cannot reach S2 at {server.endpoint}: connection refused" in words
    assert "past the delivery deadline: to ride out longer outages, raise s2.delivery-timeout-ms" in words


@pytest.mark.waits  # rides out an outage of the server
def test_the_ledger_and_a_readers_planning_wait_for_s2(server: LiteServer) -> None:
    """The driver's ledger load and append, and a read's planning (tails), made while S2 is down, return
    once it is back."""
    basin = fresh_basin(server.endpoint)
    cfg = _cfg(server, basin)

    async def ledger() -> int:
        led = Ledger(get_pool().client(cfg).basin(basin), "outage-writer", cfg=cfg)
        await led.load()
        await led.append(led.opened("run-1", None))
        return led.state.epoch

    assert _runtime.run(ledger()) == 1
    back = _back_after(server, DOWN_S)
    assert _runtime.run(ledger()) == 2
    back.join()
    back = _back_after(server, DOWN_S)
    assert _lookups.tails(cfg, ["_s2sink/ledger/outage-writer"]) == {"_s2sink/ledger/outage-writer": 2}
    back.join()


@pytest.mark.waits  # rides out an outage of the server
def test_a_query_started_during_an_outage_waits_in_its_preflight(server: LiteServer) -> None:
    """The driver's preflight retries like everything else: started while S2 is down, it passes once S2 is
    back; with s2.delivery-timeout-ms=0 it fails at once, naming the endpoint and the option."""
    basin = fresh_basin(server.endpoint)
    back = _back_after(server, DOWN_S)
    started = time.monotonic()
    preflight_write(_cfg(server, basin), ["events"], what="S2Writer")
    assert time.monotonic() - started >= DOWN_S
    back.join()
    back = _back_after(server, DOWN_S)
    with pytest.raises(PreflightError, match=r"connection refused.*s2\.delivery-timeout-ms"):
        preflight_write(
            _cfg(server, basin, delivery_timeout_ms=0, max_retries=0), ["events"], what="S2Writer"
        )
    back.join()
