"""Exit codes of ``s2-sink`` and the words for expected failures (no tracebacks for those)."""

from __future__ import annotations

from typing import Final

from s2_sink._transport.explain import FailureKind
from s2_sink._transport.explain import explain as explain_failure
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


_CODES: Final[dict[FailureKind, int]] = {
    "token": DENIED,
    "permission": DENIED,
    "basin": NOT_FOUND,
    "stream": NOT_FOUND,
}


def explain(exc: Exception, cfg: S2Config, stream: str | None) -> CliFailure:
    """Put an SDK error into words naming the endpoint, basin and stream, with the fix where there is one
    (the library's wording, `s2_sink._transport.explain`, with an exit code)."""
    words = explain_failure(exc, cfg, stream=stream, stream_fix="check the stream name")
    missing = words.kind if words.kind in ("basin", "stream") else None
    return CliFailure(words.message, _CODES.get(words.kind, FAILED), missing=missing)
