"""SDK and transport failures put into words: what failed, at which endpoint, basin and stream, and the fix,
the same whichever path met it (writer, ledger, reader, preflight, CLI). A failure given up on at the delivery
deadline ends with `deadline_note`: how long it was retried and the option that allows longer.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import urlsplit

from s2_sdk import S2ClientError, S2ServerError

from s2_sink._transport.sdk import (
    AppendIndefiniteFailureError,
    ConnectError,
    ReadTimeoutError,
    TransportError,
)
from s2_sink.config import S2Config

__all__ = [
    "TOKEN_HINT",
    "Explained",
    "FailureKind",
    "basin_endpoint",
    "deadline_note",
    "explain",
    "is_s2_not_found",
    "is_stream_deleting",
    "past_deadline",
]

FailureKind = Literal["token", "permission", "basin", "stream", "not_s2", "unreachable", "refused", "other"]

TOKEN_HINT: Final = (
    "set S2_ACCESS_TOKEN (or the s2.auth-token option, S2Config.access_token) to a valid token for this "
    "account"
)
"""The fix for a 401, worded once for every path."""

_DEADLINE: Final = "still failing after"
_SCOPES_HINT: Final = "the permissions each mode needs are listed in docs/operations.md (Token scopes)"
_S2_NOT_FOUND: Final = frozenset({"basin_not_found", "stream_not_found", "access_token_not_found"})
_CHECK_ENDPOINT: Final = "check the endpoint (s2.endpoints.basin / S2_BASIN_ENDPOINT)"


@dataclass(frozen=True, slots=True)
class Explained:
    """A failure in words, and its kind (the CLI turns kinds into exit codes)."""

    kind: FailureKind
    message: str


def basin_endpoint(cfg: S2Config) -> str:
    """The basin endpoint `cfg` dials, with its basin filled in."""
    return cfg.basin_endpoint.replace("{basin}", cfg.basin)


def deadline_note(waited_s: float, timeout_s: float, fix: str | None = None) -> str:
    """The words for a failure retried until the delivery deadline ran out, naming the option to raise
    (or `fix`, where that option cannot be set)."""
    if fix is not None:
        return f"{_DEADLINE} {waited_s:.1f} s of retries, past the deadline: {fix}"
    option = f"s2.delivery-timeout-ms (S2Config.delivery_timeout_ms, now {round(timeout_s * 1000)})"
    if timeout_s <= 0:
        return f"{_DEADLINE} the SDK's retries, not retried further: to ride out outages, raise {option}"
    return (
        f"{_DEADLINE} {waited_s:.1f} s of retries, past the delivery deadline: to ride out longer outages, "
        f"raise {option}"
    )


def past_deadline(exc: BaseException) -> bool:
    """Whether a retry loop already gave up on `exc` at the delivery deadline (it carries `deadline_note`):
    a loop around that one does not retry it again."""
    return any(isinstance(n, str) and n.startswith(_DEADLINE) for n in getattr(exc, "__notes__", ()))


def is_s2_not_found(exc: BaseException) -> bool:
    """A 404 that S2 itself sent (a basin or stream that does not exist), not one from something else."""
    return isinstance(exc, S2ServerError) and exc.status_code == 404 and exc.code in _S2_NOT_FOUND


def is_stream_deleting(exc: BaseException) -> bool:
    """S2's 409 ``stream_deletion_pending``: the stream was deleted and is still being removed (nothing of
    the request was applied)."""
    return isinstance(exc, S2ServerError) and exc.status_code == 409 and exc.code == "stream_deletion_pending"


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and cause not in seen:
        seen.append(cause)
        cause = cause.__cause__ or cause.__context__
    return seen


def _transport(exc: BaseException, cfg: S2Config, endpoint: str) -> Explained:
    chain = _chain(exc)

    def has(*types: type[BaseException]) -> bool:
        return any(isinstance(c, types) for c in chain)

    head, fix = f"cannot reach S2 at {endpoint}", f"{_CHECK_ENDPOINT} and that the server is running"
    if has(socket.gaierror):
        host = urlsplit(endpoint).hostname or endpoint
        return Explained(
            "unreachable",
            f"{head}: host {host!r} does not resolve ({exc}); {_CHECK_ENDPOINT} and the network's DNS",
        )
    if has(ConnectionRefusedError):
        return Explained("unreachable", f"{head}: connection refused ({exc}); {fix}")
    if has(ReadTimeoutError, TimeoutError):
        # Each attempt waits for the HTTP/2 handshake, then for the answer (docs/operations.md, "Timeouts").
        return Explained(
            "unreachable",
            f"{head}: no answer within s2.connect-timeout-ms={cfg.connect_timeout_ms} + "
            f"s2.request-timeout-ms={cfg.request_timeout_ms} per attempt ({type(exc).__name__}: {exc}); "
            f"{fix}",
        )
    if has(ConnectError) and not has(OSError):
        # Connected, then closed without a socket error: the peer did not take the HTTP/2 preface.
        return Explained(
            "not_s2",
            f"{head}: the connection closed before HTTP/2 started ({exc}): this does not look like an S2 "
            f"server (a plain HTTP/1 server, or http:// to a TLS port?); {_CHECK_ENDPOINT}",
        )
    return Explained("unreachable", f"{head} ({type(exc).__name__}: {exc}); {fix}")


def explain(
    exc: BaseException,
    cfg: S2Config,
    *,
    stream: str | None = None,
    stream_fix: str = "create it, or set create_streams=True (s2.create-streams)",
) -> Explained:
    """`exc` in words naming the endpoint, basin and `stream`, with the fix; `stream_fix` is the fix for a
    missing stream on this path (a reader cannot create the stream it reads). The SDK's
    ``AppendIndefiniteFailureError`` is worded as its last attempt's error."""
    failed = exc.final_attempt_error if isinstance(exc, AppendIndefiniteFailureError) else exc
    if isinstance(failed, S2ServerError):
        said = _refusal(failed, cfg, stream, stream_fix)
    elif isinstance(failed, S2ClientError | TransportError | OSError | TimeoutError):
        said = _transport(failed, cfg, basin_endpoint(cfg))
    else:
        said = Explained(
            "other", f"basin {cfg.basin!r} at {basin_endpoint(cfg)}: {type(exc).__name__}: {exc}"
        )
    notes = [n for n in getattr(exc, "__notes__", ()) if isinstance(n, str) and n.startswith(_DEADLINE)]
    return Explained(said.kind, "; ".join([said.message, *notes[:1]]))


def _refusal(  # noqa: PLR0911 - one return per kind of refusal, each with its own words
    exc: S2ServerError, cfg: S2Config, stream: str | None, stream_fix: str
) -> Explained:
    endpoint = basin_endpoint(cfg)
    where = f"basin {cfg.basin!r} at {endpoint}"
    status, code = exc.status_code, exc.code
    named = f"stream {stream!r}" if stream is not None else "the stream"
    # A basin or stream deleted while in use: S2 answers 409 ``*_deletion_pending`` until it is gone.
    deleting = f"is being deleted (409 {code}): it was deleted while in use, and S2 answers so until the "
    if status == 401:
        return Explained("token", f"{where} refused the access token (401 {code}): {TOKEN_HINT}")
    if status == 403:
        return Explained(
            "permission",
            f"{where}: the access token may not do this (403 {code}: {exc.message}); {_SCOPES_HINT}",
        )
    if status == 409 and code == "basin_deletion_pending":
        return Explained("basin", f"{where} {deleting}deletion completes; create it again once it is gone")
    if status == 409 and code == "stream_deletion_pending":
        return Explained("stream", f"{named} in {where} {deleting}deletion completes; {stream_fix}")
    if status != 404 or code == "access_token_not_found":
        target = f" on stream {stream!r}" if stream is not None else ""
        return Explained(
            "refused", f"{where} refused the request{target}: {exc.message} (HTTP {status}, {code})"
        )
    if code == "basin_not_found":
        return Explained(
            "basin",
            f"basin {cfg.basin!r} does not exist at {cfg.account_endpoint}: create it first (create_streams "
            f"creates streams, not basins; for a local one: s2-sink-lite --basin {cfg.basin})",
        )
    if code == "stream_not_found":
        return Explained("stream", f"{named} does not exist in {where}: {stream_fix}")
    body = (exc.message or "").strip().replace("\n", " ")[:120]
    return Explained(
        "not_s2",
        f"{endpoint} answered 404 without an S2 error code (body {body!r}): this does not look like an S2 "
        "server; check the endpoints (s2.endpoints.account / s2.endpoints.basin, S2_ACCOUNT_ENDPOINT / "
        "S2_BASIN_ENDPOINT)",
    )
