"""The optional JSON log format: one JSON object per line, with the fields of the text line."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from s2_sink import configure_logging
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.plan import WritePlan
from s2_sink._write.task.partition_writer import write_partition
from s2_sink.lite import LiteServer
from tests.unit.test_writer_core import config, ctx, frame


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """s2_sink's log records as JSON lines in a buffer; the handler is removed afterwards."""
    out = io.StringIO()
    handler = configure_logging(json=True, level=logging.INFO, stream=out)
    yield out
    logging.getLogger("s2_sink").removeHandler(handler)
    logging.getLogger("s2_sink").setLevel(logging.NOTSET)


def _lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_the_batch_line_has_the_same_fields_as_json(captured: io.StringIO) -> None:
    """The per-batch metrics line becomes one JSON object whose fields are the text line's key=value pairs,
    numbers as numbers and "-" (no latency measured) as null."""
    metrics = aggregate(7, [], 0.5, delivery="exactly-once")
    logging.getLogger("s2_sink.writer").info("%s", metrics.log_line())
    (doc,) = _lines(captured)
    text_fields = dict(pair.split("=", 1) for pair in metrics.log_line().split()[1:])
    assert set(text_fields) <= set(doc)
    assert doc["message"] == metrics.log_line()
    assert (doc["level"], doc["logger"]) == ("INFO", "s2_sink.writer")
    assert (doc["batch"], doc["rows_in"], doc["records"], doc["retries"]) == (7, 0, 0, 0)
    assert doc["duration_s"] == 0.5
    assert doc["ack_p50_ms"] is None
    assert doc["delivery"] == "exactly-once"
    assert doc["ts"].endswith("+00:00")


def test_a_real_retry_warning_is_one_json_line(
    captured: io.StringIO, lite: LiteServer, basin: str, lite_faults: Any
) -> None:
    """A warning logged by a real write (an append refused with 503 once, then retried) is one JSON line
    with its stream, batch, partition and retry as fields."""
    lite_faults.fail_next_appends(1, status=503)
    cfg = config(lite, basin, max_retries=0, retry_delay_ms=1, session_retries=2)
    write_partition(WritePlan(cfg=cfg, batch_id=4, stream="events"), [frame([b"x"])], ctx(4, 1))
    warnings = [d for d in _lines(captured) if d["level"] == "WARNING"]
    assert warnings, captured.getvalue()
    first = warnings[0]
    assert first["logger"] == "s2_sink._write.task.appender"
    assert (first["stream"], first["batch"], first["partition"], first["retry"]) == ("events", 4, 1, 1)


def test_the_environment_variable_turns_json_on_at_import() -> None:
    """S2_SINK_LOG_FORMAT=json makes `import s2_sink` attach the JSON handler (as on an executor)."""
    code = (
        "import logging, s2_sink\n"
        "logging.getLogger('s2_sink.writer').info('s2 batch=%s rows_in=%s', 3, 10)\n"
        "logging.getLogger('s2_sink.writer').debug('below the level')\n"
    )
    env = {**os.environ, "S2_SINK_LOG_FORMAT": "json", "S2_SINK_LOG_LEVEL": "info"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    (line,) = out.stderr.splitlines()
    doc = json.loads(line)
    assert (doc["batch"], doc["rows_in"], doc["level"]) == (3, 10, "INFO")
