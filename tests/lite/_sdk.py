"""Helpers for the lite conformance tests: an SDK client bound to a server, and a sync runner."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import timedelta
from typing import Any, TypeVar

from s2_sdk import S2, Endpoints, Retry, Timeout

from s2_sink.lite import LiteServer

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on a fresh event loop."""
    return asyncio.run(coro)


def client(srv: LiteServer | str, *, token: str = "test", request_s: float = 10.0, **kw: Any) -> S2:
    """An official SDK client whose account and basin endpoints are the lite server."""
    ep = srv if isinstance(srv, str) else srv.endpoint
    kw.setdefault("retry", Retry(max_attempts=1))
    return S2(
        token,
        endpoints=Endpoints(account=ep, basin=ep),
        timeout=Timeout(request=timedelta(seconds=request_s), connection=timedelta(seconds=3)),
        **kw,
    )
