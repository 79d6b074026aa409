"""Optional JSON log lines, one object per line, for pipelines that parse fields.

s2_sink logs ``key=value`` pairs in its messages; `JsonFormatter` keeps the message and adds each pair as a
field holding the argument a ``key=%s`` placeholder was given (not its text). `configure_logging` attaches a
handler to the ``s2_sink`` logger; ``S2_SINK_LOG_FORMAT=json`` in a process's environment does it at import
(e.g. ``spark.executorEnv.S2_SINK_LOG_FORMAT=json`` for executors).
"""

from __future__ import annotations

import ast
import json as jsonlib
import logging
import math
import os
import re
import sys
import warnings
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any, Final

__all__ = ["ENV_LOG_FORMAT", "ENV_LOG_LEVEL", "JsonFormatter", "configure_from_env", "configure_logging"]

ENV_LOG_FORMAT: Final = "S2_SINK_LOG_FORMAT"
"""``json`` or ``text``: when set, importing s2_sink attaches a handler in that format."""

ENV_LOG_LEVEL: Final = "S2_SINK_LOG_LEVEL"
"""The level of that handler (a `logging` level name). Default ``INFO``."""

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"

_PAIR_START: Final = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=(?=\S)")
# A printf conversion of a log call's format string ("%s", "%d", "%.1f", "%r"; "%%" is a literal percent).
_CONVERSION: Final = re.compile(
    r"%(?:\([^)]*\))?[-#0 +]*(?:\*|\d+)?(?:\.(?:\*|\d+))?[hlL]?([diouxXeEfFgGcrsa%])"
)
_KEY_BEFORE: Final = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=$")
_RESERVED: Final = frozenset({"ts", "level", "logger", "message", "exc_info"})
# What every LogRecord has: any other attribute came from ``extra=`` and is a field.
_RECORD_ATTRS: Final = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
_NUMBER: Final = re.compile(r"^-?\d+(?:\.\d+(?:[eE][-+]?\d+)?)?$")
_WORDS: Final[dict[str, Any]] = {"-": None, "None": None, "True": True, "False": False}
_CLOSERS: Final = {"{": "}", "[": "]", "(": ")"}


def as_json_value(value: Any) -> Any:
    """``value`` as JSON can hold it: mappings as objects, sequences and sets as arrays, anything else that is
    not a number, bool or None (a non-finite float too) as its text."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): as_json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [as_json_value(v) for v in value]
        return items if isinstance(value, (list, tuple)) else sorted(items, key=repr)
    return str(value)


def _bracketed(text: str, start: int) -> int:
    """Where the bracket or quote opening at ``start`` closes (one past it), or -1."""
    stack: list[str] = []
    quote = ""
    i = start
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
                if not stack:
                    return i + 1
        elif ch in "'\"":
            quote = ch
        elif ch in _CLOSERS:
            stack.append(_CLOSERS[ch])
        elif stack and ch == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    return -1


def _text_value(message: str, start: int) -> Any:
    """The value written at ``start`` of a message: a Python literal read whole, else one word without the
    punctuation that ends a sentence or a parenthesis."""
    if message[start] in "'\"{[(":
        end = _bracketed(message, start)
        if end > 0:
            try:
                return as_json_value(ast.literal_eval(message[start:end]))
            except (ValueError, SyntaxError, MemoryError, RecursionError):
                pass
    word = re.match(r"\S+", message[start:])
    raw = word.group(0) if word else ""
    while (raw and raw[-1] in ",;:") or (raw.endswith(")") and raw.count("(") < raw.count(")")):
        raw = raw[:-1]
    if _NUMBER.match(raw):
        return float(raw) if "." in raw else int(raw)
    return _WORDS.get(raw, raw)


def _argument_fields(record: logging.LogRecord) -> dict[str, Any]:
    """``key=%s`` placeholders of the format string paired with the call's arguments, as passed (a dict stays
    a dict)."""
    args = record.args
    if isinstance(args, Mapping) and isinstance(record.msg, str) and "%(" not in record.msg:
        args = (args,)  # logging unwraps a lone dict argument, for "%(name)s" formats; this is not one
    if not isinstance(record.msg, str) or not isinstance(args, tuple) or not args:
        return {}
    fields: dict[str, Any] = {}
    index = 0
    for conv in _CONVERSION.finditer(record.msg):
        if conv.group(1) == "%":
            continue
        if index >= len(args):
            return {}  # not a format this formatter understands: the text fallback does what it can
        key = _KEY_BEFORE.search(record.msg, 0, conv.start())
        if key is not None and key.end() == conv.start():
            fields[key.group(1)] = as_json_value(args[index])
        index += 1
    return fields


class JsonFormatter(logging.Formatter):
    """A log record as one line of JSON: ``ts`` (ISO 8601 UTC), ``level``, ``logger``, ``message``, then the
    fields: ``extra=`` attributes, ``key=%s`` placeholders' arguments, other ``key=value`` text of the message
    (numbers as numbers, literals read whole, ``-`` and ``None`` as null), and ``exc_info``."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        extra = {k: as_json_value(v) for k, v in vars(record).items() if k not in _RECORD_ATTRS}
        text = {m.group(1): _text_value(message, m.end()) for m in _PAIR_START.finditer(message)}
        for fields in (extra, _argument_fields(record), text):
            for key, value in fields.items():
                if key not in _RESERVED and key not in doc:
                    doc[key] = value
        if record.exc_info:
            doc["exc_info"] = self.formatException(record.exc_info)
        return jsonlib.dumps(doc, ensure_ascii=False, default=str)


def configure_logging(
    *, json: bool = False, level: int | str = logging.INFO, stream: IO[str] | None = None
) -> logging.Handler:
    """Send the ``s2_sink`` logger's records to ``stream`` (default stderr) at ``level``, as text or, with
    ``json``, `JsonFormatter` lines; calling it again replaces its handler."""
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
    """Apply ``S2_SINK_LOG_FORMAT`` and ``S2_SINK_LOG_LEVEL`` if the format is set; a bad value is warned
    about and ignored (logging must never stop the import)."""
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
