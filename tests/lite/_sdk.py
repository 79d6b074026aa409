"""Helpers for the lite conformance tests: an SDK client bound to a server, and a sync runner."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from s2_sdk import S2, Endpoints, Retry, S2ServerError, Timeout

from s2_sink.lite import LiteServer
from tests import s2_target
from tests.s2_target import ExternalS2

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh event loop."""
    return asyncio.run(coro)


def client(
    srv: LiteServer | ExternalS2 | str, *, token: str | None = None, request_s: float = 10.0, **kw: Any
) -> S2:
    """An official SDK client whose endpoints are the lite server's (or those of the S2 the suite runs
    against, `tests/s2_target.py`), with its token unless one is given."""
    account, basin = (srv, srv) if isinstance(srv, str) else s2_target.endpoints(srv)
    kw.setdefault("retry", Retry(max_attempts=1))
    return S2(
        token if token is not None else "test" if isinstance(srv, str) else s2_target.token(srv),
        endpoints=Endpoints(account=account, basin=basin),
        timeout=Timeout(request=timedelta(seconds=request_s), connection=timedelta(seconds=3)),
        **kw,
    )


async def deletion_completes(
    probe: Callable[[], Awaitable[object]],
    timeout_s: float = 10.0,
    *,
    answers_while_pending: bool = False,
) -> S2ServerError:
    """Polls ``probe`` until the asynchronous deletion is done and it fails with 404; returns that error.
    While the deletion runs the probe fails with 409 ``*_deletion_pending``, or, where S2 still answers it
    (``answers_while_pending``: a basin's config), succeeds. A mutating call is not a probe: once the deletion
    finishes between two calls it would legitimately succeed, so tests assert its 409 once, before polling."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            await probe()
        except S2ServerError as exc:
            if exc.status_code == 404:
                return exc
            if not (exc.status_code == 409 and exc.code.endswith("_deletion_pending")):
                raise AssertionError(f"expected 409 *_deletion_pending while deleting, got {exc!r}") from exc
        else:
            if not answers_while_pending:
                raise AssertionError("a resource being deleted answered as if it were not")
        assert time.monotonic() < deadline, "the deletion did not complete in time"
        await asyncio.sleep(0.05)
