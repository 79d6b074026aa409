"""How ``s2-sink`` prints: ISO 8601 times for people; a reader that stops early (``| head``) is no error."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime

__all__ = ["iso_ms", "quiet_closed_stdout"]


def iso_ms(ms: int | None) -> str:
    """Milliseconds since the Unix epoch (S2's timestamps) as ISO 8601 UTC, e.g. ``2026-01-05T10:00:00.412Z``;
    ``-`` for none (an empty stream's tail has timestamp 0)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def quiet_closed_stdout() -> None:
    """After the reader of stdout went away (`BrokenPipeError`): point stdout at /dev/null, so flushing what
    is still buffered at exit neither fails nor prints "Exception ignored" on stderr."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
