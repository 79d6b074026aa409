"""Exit codes of ``s2-sink`` and the words for expected failures (no tracebacks for those)."""

from __future__ import annotations

from typing import Final

from s2_sdk import S2ClientError, S2ServerError
from s2_sdk._exceptions import TransportError  # not exported, but what a refused connection raises (0.13)

from s2_sink.config import S2Config

__all__ = ["EXIT_CODES", "CliFailure", "explain"]

OK: Final = 0
FAILED: Final = 1
USAGE: Final = 2
NOT_FOUND: Final = 3
DENIED: Final = 4
INTERRUPTED: Final = 130

EXIT_CODES: Final[dict[int, str]] = {
    OK: "success",
    FAILED: "S2 refused the request or could not be reached, or the data could not be decoded",
    USAGE: "bad arguments or configuration (including a missing --yes)",
    NOT_FOUND: "the basin, stream or ledger does not exist",
    DENIED: "the access token was refused (401) or lacks a permission (403)",
    INTERRUPTED: "interrupted (Ctrl-C, e.g. to end `tail --follow`)",
}


class CliFailure(Exception):
    """An expected failure: printed as ``s2-sink: <message>`` and turned into `code`."""

    def __init__(self, message: str, code: int = FAILED, *, missing: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.missing = missing
        """``"basin"`` or ``"stream"`` when the failure is that one does not exist."""


def explain(exc: Exception, cfg: S2Config, stream: str | None) -> CliFailure:
    """Put an SDK error into words naming the endpoint, basin and stream, with the fix where there is one."""
    where = f"basin {cfg.basin!r} at {cfg.basin_endpoint.replace('{basin}', cfg.basin)}"
    if isinstance(exc, S2ServerError):
        if exc.status_code == 401:
            return CliFailure(
                f"{where} refused the access token (401 {exc.code}): set S2_ACCESS_TOKEN to a valid token "
                "for this account",
                DENIED,
            )
        if exc.status_code == 403:
            return CliFailure(
                f"{where}: the access token may not do this (403 {exc.code}: {exc.message}); the operations "
                "each command needs are listed in docs/operations.md",
                DENIED,
            )
        if exc.code == "basin_not_found":
            return CliFailure(
                f"basin {cfg.basin!r} does not exist at {cfg.account_endpoint} (for a local one: "
                f"s2-lite --basin {cfg.basin})",
                NOT_FOUND,
                missing="basin",
            )
        if exc.code == "stream_not_found" and stream is not None:
            return CliFailure(f"stream {stream!r} does not exist in {where}", NOT_FOUND, missing="stream")
        return CliFailure(
            f"{where} refused the request on stream {stream!r}: {exc.message} "
            f"(HTTP {exc.status_code}, {exc.code})"
        )
    if isinstance(exc, S2ClientError | TransportError | OSError):
        return CliFailure(
            f"cannot reach S2 at {cfg.basin_endpoint.replace('{basin}', cfg.basin)} ({type(exc).__name__}: "
            f"{exc}); check S2_BASIN_ENDPOINT / --endpoint and that the server is running"
        )
    return CliFailure(f"{where}: {type(exc).__name__}: {exc}")
