"""Optional JSON log lines: one JSON object per line, for log pipelines that parse fields.

s2_sink logs through ``logging.getLogger(__name__)`` with ``key=value`` pairs in its messages (the per-batch
metrics line, retries, exactly-once decisions). `JsonFormatter` keeps those messages and adds each pair as a
field, so the JSON carries the same fields as the text line. `configure_logging` attaches a handler to the
``s2_sink`` logger, in text or JSON; setting ``S2_SINK_LOG_FORMAT=json`` in a process's environment does the
same when s2_sink is imported (e.g. ``spark.executorEnv.S2_SINK_LOG_FORMAT=json`` for executors).
"""

from __future__ import annotations

import json as jsonlib
import logging
import os
import re
import sys
import warnings
from datetime import UTC, datetime
from typing import IO, Any, Final

__all__ = ["ENV_LOG_FORMAT", "ENV_LOG_LEVEL", "JsonFormatter", "configure_from_env", "configure_logging"]

ENV_LOG_FORMAT: Final = "S2_SINK_LOG_FORMAT"
"""``json`` or ``text``: when set, importing s2_sink attaches a handler in that format."""

ENV_LOG_LEVEL: Final = "S2_SINK_LOG_LEVEL"
"""The level of that handler (a `logging` level name). Default ``INFO``."""

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_PAIR: Final = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=(\S+)")
_RESERVED: Final = frozenset({"ts", "level", "logger", "message", "exc_info"})
_INT: Final = re.compile(r"^-?\d+$")
_FLOAT: Final = re.compile(r"^-?\d+\.\d+(?:[eE][-+]?\d+)?$")


def _value(text: str) -> Any:
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    if text == "-":  # how the text line shows "none" (e.g. no ack latency measured)
        return None
    return text


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON: ``ts`` (ISO 8601, UTC), ``level``, ``logger``, ``message``, then
    every ``key=value`` pair of the message as a field (integers and decimals as numbers, ``-`` as null),
    and ``exc_info`` with the traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        for key, raw in _PAIR.findall(message):
            if key not in _RESERVED and key not in doc:
                doc[key] = _value(raw.rstrip(",;:"))
        if record.exc_info:
            doc["exc_info"] = self.formatException(record.exc_info)
        return jsonlib.dumps(doc, ensure_ascii=False, default=str)


def configure_logging(
    *, json: bool = False, level: int | str = logging.INFO, stream: IO[str] | None = None
) -> logging.Handler:
    """Send s2_sink's log records (the ``s2_sink`` logger and its children) to `stream` (default stderr) at
    `level`, as text or, with `json`, one JSON object per line (`JsonFormatter`). Calling it again replaces
    the handler it attached before. Returns the handler."""
    logger = logging.getLogger("s2_sink")
    for old in [h for h in logger.handlers if getattr(h, "_s2_sink_handler", False)]:
        logger.removeHandler(old)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if json else logging.Formatter(TEXT_FORMAT))
    handler._s2_sink_handler = True  # type: ignore[attr-defined]  # marks the handler this function owns
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler


def configure_from_env() -> logging.Handler | None:
    """Apply ``S2_SINK_LOG_FORMAT`` (``json`` or ``text``) and ``S2_SINK_LOG_LEVEL``, if the format is set;
    an unknown value is warned about and ignored (logging must never stop the import)."""
    fmt = os.environ.get(ENV_LOG_FORMAT, "").strip().lower()
    if not fmt:
        return None
    if fmt not in ("json", "text"):
        warnings.warn(f"s2_sink: ignoring {ENV_LOG_FORMAT}={fmt!r}: use json or text", stacklevel=2)
        return None
    level = os.environ.get(ENV_LOG_LEVEL, "INFO").strip().upper() or "INFO"
    if not isinstance(logging.getLevelName(level), int):
        warnings.warn(f"s2_sink: ignoring {ENV_LOG_LEVEL}={level!r}: not a logging level", stacklevel=2)
        level = "INFO"
    return configure_logging(json=fmt == "json", level=level)
