"""What a stream name may be: S2's rule, and the sink's for the streams it writes rows to. A routed row naming
a stream S2 refuses would fail its micro-batch on every replay, so the write path checks every routed name
here and treats a bad one as a bad row.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BOOKKEEPING_PREFIX", "MAX_STREAM_NAME_BYTES", "shown", "stream_name_problem", "target_problem"]

MAX_STREAM_NAME_BYTES: Final = 512
"""S2's ``caps::MAX_STREAM_NAME_LEN``, in bytes of UTF-8."""

BOOKKEEPING_PREFIX: Final = "_s2sink/"
"""The prefix of every stream the exactly-once protocol keeps for itself."""

_SHOWN_CHARS: Final = 40


def stream_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid S2 stream name, as a clause to follow the name, or None."""
    reason = _reason(name)
    return None if reason is None else f"is not a valid S2 stream name: {reason}"


def target_problem(name: str) -> str | None:
    """Why rows may not go to stream ``name`` (`stream_name_problem`, or the sink's bookkeeping), or None."""
    problem = stream_name_problem(name)
    if problem is None and name.startswith(BOOKKEEPING_PREFIX):
        return (
            f"is among the sink's exactly-once ledgers and registers (under {BOOKKEEPING_PREFIX!r}), "
            "where no rows may go"
        )
    return problem


def _reason(name: str) -> str | None:
    if not name:
        return "it is empty"
    if name in (".", ".."):
        return "S2 refuses '.' and '..'"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    if size > MAX_STREAM_NAME_BYTES:
        return f"it is {size} bytes of UTF-8, over S2's limit of {MAX_STREAM_NAME_BYTES}"
    if "\0" in name:
        return "it contains a NUL character"
    return None


def shown(name: str) -> str:
    if len(name) <= _SHOWN_CHARS:
        return repr(name)
    return f"{name[:_SHOWN_CHARS]!r}... ({len(name)} characters)"
