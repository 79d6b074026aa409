"""The optional JSON log format: one JSON object per line, with the fields of the text line."""

from __future__ import annotations

import ast
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
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import WritePlan
from s2_sink.lite import LiteServer
from tests.unit.write.test_partition_writer import config, ctx, frame


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
    with its stream, batch, partition, retry and the deadline's option as fields."""
    lite_faults.fail_next_appends(1, status=503)
    cfg = config(lite, basin, max_retries=0, retry_delay_ms=1)
    write_partition(WritePlan(cfg=cfg, batch_id=4, stream="events"), [frame([b"x"])], ctx(4, 1))
    warnings = [d for d in _lines(captured) if d["level"] == "WARNING"]
    assert warnings, captured.getvalue()
    first = warnings[0]
    assert first["logger"] == "s2_sink._transport.retry"
    assert (first["stream"], first["batch"], first["partition"], first["retry"]) == ("events", 4, 1, 1)
    assert first["s2.delivery-timeout-ms"] == 120000


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


def test_fields_are_the_values_passed_not_their_text(captured: io.StringIO) -> None:
    """Each ``key=%s`` placeholder's field is the argument itself as JSON: a dict an object, a tuple and a
    list arrays, a bool a bool, None null, text with spaces and quotes the whole text; a value followed by
    punctuation (``(recovery=%s)``) keeps none of it."""
    log = logging.getLogger("s2_sink.datasource._readers")
    log.info(
        "s2 source: lag_by_stream=%s streams=%s ids=%s recovery=%s last=%s name=%r note=%s (flag=%s)",
        {"orders": 2702, "it's": {"a b": [1, 2]}},
        ("orders", "events"),
        [1, None, 2.5],
        False,
        None,
        'it\'s "quoted" = x',
        "two words",
        True,
    )
    (doc,) = _lines(captured)
    assert doc["lag_by_stream"] == {"orders": 2702, "it's": {"a b": [1, 2]}}
    assert doc["streams"] == ["orders", "events"]
    assert doc["ids"] == [1, None, 2.5]
    assert doc["recovery"] is False
    assert doc["last"] is None
    assert doc["name"] == 'it\'s "quoted" = x'
    assert doc["note"] == "two words"
    assert doc["flag"] is True


def test_extra_fields_are_json_values(captured: io.StringIO) -> None:
    """Fields passed with ``extra=`` are fields of the line, as JSON values (tuples as arrays)."""
    logging.getLogger("s2_sink.writer").info(
        "committed", extra={"ends": {"events": 8}, "streams": ("a", "b"), "ok": True, "why": None}
    )
    (doc,) = _lines(captured)
    assert (doc["ends"], doc["streams"], doc["ok"], doc["why"]) == ({"events": 8}, ["a", "b"], True, None)
    assert doc["message"] == "committed"


def test_pairs_in_preformatted_text_are_read_as_literals(captured: io.StringIO) -> None:
    """``key=value`` text that reached the message already formatted (one ``%s`` for a whole line) is read as
    a Python literal where it is one: a dict repr whole, True/False/None as JSON, a closing parenthesis
    after a value not part of it."""
    text = "run opened (recovery=False) lag={'orders': 5, 'b c': 1} tag='x y' n=3, gone=None"
    logging.getLogger("s2_sink.writer").info("%s", text)
    (doc,) = _lines(captured)
    assert doc["recovery"] is False
    assert doc["lag"] == {"orders": 5, "b c": 1}
    assert doc["tag"] == "x y"
    assert (doc["n"], doc["gone"]) == (3, None)
    assert doc["message"] == text


def test_the_real_source_and_sink_lines_parse_to_their_values(captured: io.StringIO) -> None:
    """The two lines the issue found garbled, logged with their real format strings and arguments."""
    logging.getLogger("s2_sink.datasource._readers").info(
        "s2 source: planned batch batch_records=%d lag_records=%d streams=%d lag_by_stream=%s",
        10,
        5,
        2,
        {"orders": 5},
    )
    logging.getLogger("s2_sink._exactly_once.sink_run").info(
        "exactly-once: writer %s opened execution %s epoch %s after batch %s (recovery=%s)",
        "w",
        "r",
        3,
        7,
        False,
    )
    first, second = _lines(captured)
    assert (first["batch_records"], first["lag_by_stream"]) == (10, {"orders": 5})
    assert second["recovery"] is False


def test_a_lone_dict_argument_is_a_json_object(captured: io.StringIO) -> None:
    """A call whose only argument is a dict (which logging unwraps) still gives that dict as the field."""
    logging.getLogger("s2_sink.writer").info("ends=%s", {"events": 8, "a b": None})
    (doc,) = _lines(captured)
    assert doc["ends"] == {"events": 8, "a b": None}


def test_a_nested_literal_is_parsed_once(captured: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dict of dicts in preformatted text is found by one scan and handed to the parser once, not tried at
    each closing brace (which made formatting grow with the square of the literal's size)."""
    parsed: list[str] = []
    literal_eval = ast.literal_eval

    def counting(text: str) -> Any:
        parsed.append(text)
        return literal_eval(text)

    monkeypatch.setattr(ast, "literal_eval", counting)
    per = {f"s/{i}": {"records": i, "end": i} for i in range(50)}
    logging.getLogger("s2_sink.writer").info("%s", f"s2 batch=3 per_stream={per!r}")
    (doc,) = _lines(captured)
    assert doc["per_stream"] == per
    assert parsed == [repr(per)]
