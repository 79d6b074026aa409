"""The ``s2-sink`` commands ride out a transient read failure, and word the wait for a command-line user: a
command takes no ``s2.delivery-timeout-ms``, so its warning says what such a user can do instead. The failure
is one 503 raised by the SDK's read (the lite server injects faults into appends only)."""

from __future__ import annotations

import logging

import pytest
from s2_sdk import AppendInput, Record

from s2_sink.lite import LiteServer
from tests.cli.test_cli import append, cli, config, write_exactly_once
from tests.faults._support import fail_one_read


def _waits(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


@pytest.mark.parametrize(
    "case",
    [
        (("tail", "events", "-n", "1"), 0),
        (("ledger", "show", "job"), 0),
        (("ledger", "list"), 0),
        (("ledger", "reset", "job", "--yes"), 0),
        (("ledger", "forget", "job", "events"), 2),  # the stream was not reset: refused after the read
    ],
)
def test_a_command_waits_out_a_failed_read_in_its_own_words(
    lite: LiteServer,
    basin: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    case: tuple[tuple[str, ...], int],
) -> None:
    """One 503 on a read: the command retries it and ends as it would have; the warning of its wait says
    Ctrl-C stops it and names no option the command lacks."""
    args, code = case
    write_exactly_once(config(lite, basin), "job", [[b'{"id":0}']])
    append(lite, basin, "events", [AppendInput(records=[Record(b'{"id":1}')])])
    left = fail_one_read(monkeypatch)
    with caplog.at_level(logging.WARNING):
        out = cli(lite.endpoint, *args, "--basin", basin)
    assert out.returncode == code, out.stderr
    assert left == [0]  # the read failed once
    wait, answered = _waits(caplog)
    assert answered.startswith("S2 answers again")
    assert "Ctrl-C stops it sooner; run it again once S2 answers" in wait
    assert "s2.delivery-timeout-ms" not in wait
