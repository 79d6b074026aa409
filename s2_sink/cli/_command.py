"""What every ``s2-sink`` command shares: connection flags and config, the client, expected failures in words
with their exit codes (no tracebacks), times as ISO 8601.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final, TypeVar

import orjson
from s2_sdk import S2, S2Error

from s2_sink._transport.explain import FailureKind
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
    "add_connection_flags",
    "config_from",
    "explain",
    "iso_ms",
    "print_json",
    "run_io",
]

OK: Final = 0
FAILED: Final = 1
USAGE: Final = 2
NOT_FOUND: Final = 3
DENIED: Final = 4
INTERRUPTED: Final = 130

T = TypeVar("T")

EXIT_CODES: Final[dict[int, str]] = {
    OK: "success",
    FAILED: "S2 refused the request or could not be reached, or the data could not be decoded",
    USAGE: "bad arguments or configuration (including a missing --yes)",
    NOT_FOUND: "the basin, stream or ledger does not exist",
    DENIED: "the access token was refused (401) or lacks a permission (403)",
    INTERRUPTED: "interrupted (Ctrl-C, e.g. to end `tail --follow`)",
}


PATIENCE: Final = Patience(
    fix="the s2-sink command waits this long: Ctrl-C stops it sooner; run it again once S2 answers"
)
"""How a command's own reads ride out an outage: the library's deadline, worded for a command line, where
the option ``s2.delivery-timeout-ms`` cannot be set."""


class CliFailure(Exception):
    """An expected failure: printed as ``s2-sink: <message>`` and turned into `code`."""

    def __init__(self, message: str, code: int = FAILED, *, missing: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.missing = missing
        """``"basin"`` or ``"stream"`` when the failure is that one does not exist."""


_CODES: Final[dict[FailureKind, int]] = {
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


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--basin", required=True, help="the basin (option s2.basin of the library)")
    parser.add_argument(
        "--endpoint",
        default=None,
        help="one origin for both the account and the basin endpoint (e.g. a lite server's "
        "http://127.0.0.1:8080); default: S2_ACCOUNT_ENDPOINT / S2_BASIN_ENDPOINT, else the S2 cloud",
    )


def config_from(args: argparse.Namespace) -> S2Config:
    overrides: dict[str, Any] = {}
    if args.endpoint is not None:
        overrides = {"account_endpoint": args.endpoint, "basin_endpoint": args.endpoint}
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


def print_json(doc: object) -> None:
    sys.stdout.write(orjson.dumps(doc, default=str).decode() + "\n")


def iso_ms(ms: int | None) -> str:
    """S2's milliseconds since the epoch as ISO 8601 UTC (``2026-01-05T10:00:00.412Z``); ``-`` for none (an
    empty stream's tail has timestamp 0)."""
    if not ms:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
