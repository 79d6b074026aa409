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
    pending: Callable[[], Awaitable[object]],
    timeout_s: float = 10.0,
    *,
    gone: Callable[[], Awaitable[object]] | None = None,
) -> S2ServerError:
    """While an asynchronous deletion runs, ``pending`` fails with 409 ``*_deletion_pending``; once it is
    done, ``gone`` (by default ``pending`` itself) fails with 404. Returns that 404 error."""
    deadline = time.monotonic() + timeout_s
    while True:
        for call in (gone, pending) if gone is not None else (pending,):
            try:
                await call()
            except S2ServerError as exc:
                if exc.status_code == 404:
                    return exc
                if call is pending and exc.status_code == 409 and exc.code.endswith("_deletion_pending"):
                    continue
                raise AssertionError(f"expected 409 *_deletion_pending while deleting, got {exc!r}") from exc
            if call is pending:
                raise AssertionError("a resource being deleted answered as if it were not")
        assert time.monotonic() < deadline, "the deletion did not complete in time"
        await asyncio.sleep(0.05)
