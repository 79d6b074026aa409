"""Warm S2 clients, shared by the tasks a Python worker runs one after another.

Everything here lives on the process-wide loop of `s2_sink._transport.runtime` and is touched only from it, so
no locks are needed. Clients are keyed by everything that shapes them (endpoints, a hash of the token,
timeouts, retry settings, compression). One client per key serves the unary calls (stream creation, reads,
ledger appends, fences), which the SDK retries, and carries the append sessions
(`_transport.append_session.BulkAppendSession`, opened per task on its transport: a new HTTP/2 stream on a
warm connection), which the partition writer's appender (`_write.task.appender`, policy in `_transport.retry`)
retries itself, from its own list of unacknowledged chunks, on a fresh session. Clients are closed with the
process (`close_all`); the SDK closes their idle connections itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Protocol

from s2_sdk import (
    S2,
    AppendRetryPolicy,
    Compression,
    Endpoints,
    Retry,
    Timeout,
)

from s2_sink.config import S2Config

__all__ = ["ClientFactory", "SessionPool", "get_pool", "install_pool"]

log = logging.getLogger(__name__)

_COMPRESSION = {"none": Compression.NONE, "zstd": Compression.ZSTD, "gzip": Compression.GZIP}
_POLICY = {"ALL": AppendRetryPolicy.ALL, "NO_SIDE_EFFECTS": AppendRetryPolicy.NO_SIDE_EFFECTS}


@dataclass(frozen=True, slots=True)
class _ClientKey:
    account_endpoint: str
    basin_endpoint: str
    token_fingerprint: str
    append_retry_policy: str
    max_retries: int
    retry_delay_ms: int
    request_timeout_ms: int
    connect_timeout_ms: int
    compression: str

    @classmethod
    def of(cls, cfg: S2Config) -> _ClientKey:
        return cls(
            cfg.account_endpoint,
            cfg.basin_endpoint,
            cfg.token_fingerprint,
            cfg.append_retry_policy,
            cfg.max_retries,
            cfg.retry_delay_ms,
            cfg.request_timeout_ms,
            cfg.connect_timeout_ms,
            cfg.compression,
        )


@dataclass(slots=True)
class _ClientEntry:
    client: S2
    ensured: set[tuple[str, str]] = field(default_factory=set)
    """(basin, stream) pairs this process created or found (`SessionPool.ensure_stream`)."""


def make_client(cfg: S2Config) -> S2:
    """A new SDK client for `cfg` (call on the loop); the SDK retries its unary requests."""
    client: S2 = S2(
        cfg.access_token,
        endpoints=Endpoints(account=cfg.account_endpoint, basin=cfg.basin_endpoint),
        timeout=Timeout(
            request=timedelta(milliseconds=cfg.request_timeout_ms),
            connection=timedelta(milliseconds=cfg.connect_timeout_ms),
        ),
        retry=Retry(
            max_attempts=cfg.max_retries + 1,
            min_base_delay=timedelta(milliseconds=cfg.retry_delay_ms),
            max_base_delay=timedelta(milliseconds=max(cfg.retry_delay_ms * 8, 1000)),
            append_retry_policy=_POLICY[cfg.append_retry_policy],
        ),
        compression=_COMPRESSION[cfg.compression],
    )
    return client


class ClientFactory(Protocol):
    """Makes the SDK client for a config (`make_client` in production; an in-memory S2 in the
    deterministic simulation, tests/sim, which stands in for the service behind the SDK's surface)."""

    def __call__(self, cfg: S2Config) -> S2: ...


class SessionPool:
    """Process-wide pool of SDK clients. Use only on the runtime loop."""

    def __init__(self, client_factory: ClientFactory = make_client) -> None:
        self._make_client = client_factory
        self._clients: dict[_ClientKey, _ClientEntry] = {}

    def client(self, cfg: S2Config) -> S2:
        """The shared client for `cfg`'s endpoints and token (created on first use; kept for the process,
        so callers may keep it)."""
        return self._client_entry(cfg).client

    def _client_entry(self, cfg: S2Config) -> _ClientEntry:
        key = _ClientKey.of(cfg)
        entry = self._clients.get(key)
        if entry is None:
            entry = self._clients[key] = _ClientEntry(self._make_client(cfg))
        return entry

    async def ensure_stream(self, cfg: S2Config, stream: str) -> None:
        """Create `stream` in `cfg.basin` if missing (once per client and stream)."""
        entry = self._client_entry(cfg)
        if (cfg.basin, stream) in entry.ensured:
            return
        await entry.client.basin(cfg.basin).ensure_stream(stream)
        entry.ensured.add((cfg.basin, stream))

    def forget_stream(self, cfg: S2Config, stream: str) -> None:
        """`stream` answered 404 after this process ensured it (deleted since: S2's ``delete_on_empty``, or
        an operator): the next `ensure_stream` asks S2 again instead of trusting the cache."""
        self._client_entry(cfg).ensured.discard((cfg.basin, stream))

    async def close_all(self) -> None:
        """Close every client."""
        for entry in self._clients.values():
            await _close_client(entry.client)
        self._clients.clear()

    def stats(self) -> dict[str, Any]:
        """Counts for tests and debugging: clients."""
        return {"clients": len(self._clients)}


async def _close_client(client: S2) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(client.close(), timeout=10)


_pool: SessionPool | None = None
_pool_pid: int | None = None


def get_pool() -> SessionPool:
    """The process's pool (a forked child gets a fresh one: SDK objects never cross a fork)."""
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():
        _pool, _pool_pid = SessionPool(), os.getpid()
    return _pool


def install_pool(pool: SessionPool) -> None:
    """Make `pool` this process's pool (the simulation installs one over an in-memory S2, and a fresh one
    for each simulated process: a new process starts with no clients or cached streams)."""
    global _pool, _pool_pid
    _pool, _pool_pid = pool, os.getpid()
