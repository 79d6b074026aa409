"""API errors as the S2 service reports them: a status code plus a JSON body.

Standard errors carry ``{"code", "message"}``; the append-condition (412) and read-unwritten (416) errors have
their own body shapes, which the SDK maps to ``SeqNumMismatchError``, ``FencingTokenMismatchError`` and
``ReadUnwrittenError``.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "ApiError",
    "bad",
    "conflict",
    "fencing_token_mismatch",
    "invalid",
    "not_found",
    "read_unwritten",
    "seq_num_mismatch",
]


class ApiError(Exception):
    """An error answered to the client as ``status`` with a JSON ``body``."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        body: dict[str, Any] | None = None,
        *,
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self._body = body
        #: Extra response headers (``retry-after-ms`` on 429).
        self.headers = headers or []

    def body(self) -> bytes:
        """The JSON error body."""
        if self._body is not None:
            return orjson.dumps(self._body)
        return orjson.dumps({"code": self.code, "message": self.message})

    def __repr__(self) -> str:
        return f"ApiError({self.status}, {self.code!r}, {self.message!r})"


def seq_num_mismatch(expected: int) -> ApiError:
    """412: ``match_seq_num`` differs from the next assignable sequence number."""
    return ApiError(412, "seq_num_mismatch", f"expected seq_num {expected}", {"seq_num_mismatch": expected})


def fencing_token_mismatch(current: str) -> ApiError:
    """412: the append's fencing token differs from the stream's current token."""
    return ApiError(
        412,
        "fencing_token_mismatch",
        f"current fencing token {current!r}",
        {"fencing_token_mismatch": current},
    )


def read_unwritten(tail_seq: int, tail_ts: int) -> ApiError:
    """416: the read starts beyond the tail (or at it, when it cannot wait)."""
    return ApiError(
        416,
        "read_unwritten",
        "read from an unwritten position",
        {"tail": {"seq_num": tail_seq, "timestamp": tail_ts}},
    )


def bad(code: str, message: str) -> ApiError:
    """400 with one of the ``bad_*`` codes."""
    return ApiError(400, code, message)


def invalid(message: str) -> ApiError:
    """422 ``invalid``: a well-formed request that breaks a rule (limits, command records, timestamps)."""
    return ApiError(422, "invalid", message)


def not_found(code: str, message: str) -> ApiError:
    """404 ``basin_not_found`` / ``stream_not_found``."""
    return ApiError(404, code, message)


def conflict(code: str, message: str) -> ApiError:
    """409, e.g. ``resource_already_exists``."""
    return ApiError(409, code, message)
