"""What every ``s2-sink`` command shares: its config and client, expected failures in words with their exit
codes (no tracebacks), its output as text or JSON lines, times as ISO 8601.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import orjson
from s2_sdk import S2, S2Error

from s2_sink._transport.explain import explain as explain_failure
from s2_sink._transport.retry import Patience
from s2_sink._transport.runtime import make_client
from s2_sink._transport.sdk import TransportError
from s2_sink.config import S2Config
from s2_sink.errors import ConfigError

__all__ = [
    "EXIT_CODES",
    "PATIENCE",
    "CliFailure",
    "Output",
    "Run",
    "config_from",
    "explain",
    "iso_ms",
    "run_io",
]

OK, FAILED, USAGE, NOT_FOUND, DENIED, INTERRUPTED = 0, 1, 2, 3, 4, 130

T = TypeVar("T")

EXIT_CODES: Final[dict[int, str]] = {
    OK: "success",
    FAILED: "S2 refused the request or could not be reached, or the data could not be decoded",
    USAGE: "bad arguments or configuration (including a missing --yes)",
    NOT_FOUND: "the basin, stream or ledger does not exist",
    DENIED: "the access token was refused (401) or lacks a permission (403)",
    INTERRUPTED: "interrupted (Ctrl-C, e.g. to end `tail --follow`)",
}

# A command's own reads ride out an outage for the library's deadline, worded for a command line, where the
# option s2.delivery-timeout-ms cannot be set.
PATIENCE: Final = Patience(
    fix="the s2-sink command waits this long: Ctrl-C stops it sooner; run it again once S2 answers"
)


class CliFailure(Exception):
    """An expected failure: printed as ``s2-sink: <message>`` and turned into `code`; `missing` is
    ``"basin"`` or ``"stream"`` when the failure is that one does not exist."""

    def __init__(self, message: str, code: int = FAILED, *, missing: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.missing = missing


_CODES: Final[dict[str, int]] = {
    "token": DENIED,
    "permission": DENIED,
    "basin": NOT_FOUND,
    "stream": NOT_FOUND,
}


def explain(exc: Exception, cfg: S2Config, stream: str | None) -> CliFailure:
    """An SDK error in the library's words (endpoint, basin, stream, the fix), with an exit code."""
    words = explain_failure(exc, cfg, stream=stream, stream_fix="check the stream name")
    missing = words.kind if words.kind in ("basin", "stream") else None
    return CliFailure(words.message, _CODES.get(words.kind, FAILED), missing=missing)


@dataclass(frozen=True, slots=True)
class Output:
    """What a command prints: `lines` as text, or with ``--json`` `docs` as JSON lines."""

    lines: list[str] = field(default_factory=list)
    docs: list[dict[str, Any]] = field(default_factory=list)

    def print(self, as_json: bool) -> None:
        text = [orjson.dumps(doc, default=str).decode() for doc in self.docs] if as_json else self.lines
        sys.stdout.writelines(line + "\n" for line in text)


Run = Callable[[argparse.Namespace, S2Config], Output]
"""A command: its arguments and connection config to what it prints."""


def config_from(args: argparse.Namespace) -> S2Config:
    overrides = (
        {} if args.endpoint is None else {"account_endpoint": args.endpoint, "basin_endpoint": args.endpoint}
    )
    try:
        return S2Config.from_env(basin=args.basin, **overrides)
    except ConfigError as exc:
        raise CliFailure(str(exc), USAGE) from exc


def run_io(cfg: S2Config, stream: str | None, work: Callable[[S2], Awaitable[T]]) -> T:
    """``work`` on a client of its own, on a fresh event loop; SDK and transport errors become a
    `CliFailure`."""

    async def go() -> T:
        client = make_client(cfg)
        try:
            return await work(client)
        finally:
            await client.close()

    try:
        return asyncio.run(go())
    except BrokenPipeError:
        raise  # our stdout's reader went away (`| head`): not a connection failure (see `main`)
    except (S2Error, TransportError, OSError) as exc:
        raise explain(exc, cfg, stream) from exc


def iso_ms(ms: int | None) -> str:
    """S2's milliseconds since the epoch as ISO 8601 UTC (``2026-01-05T10:00:00.412Z``); ``-`` for none (an
    empty stream's tail has timestamp 0)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
