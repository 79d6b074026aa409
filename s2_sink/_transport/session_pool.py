"""Warm S2 clients and append sessions, shared by the tasks a Python worker runs one after another.

Everything here lives on the process-wide loop of `s2_sink._transport.runtime` and is touched only from it, so
no locks are needed. Clients are keyed by everything that shapes them (endpoints, a hash of the token,
timeouts, retry settings, compression); sessions by (client, basin, stream, in-flight limits).

A session is leased to one partition writer at a time (`acquire` / `release`). A healthy release
returns it to the idle list; any error drops it, because a failed append poisons the whole S2 session
(a 412 from a fencing token or ``match_seq_num`` ends it, and nothing after it becomes durable).
Idle sessions and clients are closed after ``S2Config.session_idle_timeout_ms``.

Append sessions come from a client whose SDK retries are off: the partition writer's appender
(`_write.task.appender`, policy in `_transport.retry`) retries them itself, from its own list of
unacknowledged chunks, on a fresh session. (SDK 0.13's in-session retry can lose an
input submitted while it reconnects -- the input is taken from the queue by a send loop that is being
cancelled -- and then pairs the following acks with the wrong batches; a failed session without
retries fails every pending batch instead, so nothing is misattributed.)

Shutdown order of one session (`_close_session`): it is already drained by the writer (every ticket
awaited), so ``close()`` half-closes the S2S stream and returns once the server ends it; a poisoned
session re-raises its error from ``close()``, which is logged and swallowed. A client is closed
after its last session, which closes its HTTP/2 connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, Protocol

from s2_sdk import (
    S2,
    AppendRetryPolicy,
    AppendSession,
    Compression,
    Endpoints,
    Retry,
    S2Basin,
    S2ServerError,
    S2Stream,
    StreamConfig,
    Timeout,
)

from s2_sink._transport.explain import is_stream_deleting
from s2_sink._transport.retry import Backoff, Patience, patiently
from s2_sink.config import ONE_MIB, S2Config

__all__ = [
    "CREATE_CONCURRENCY",
    "DELETION_WAIT",
    "ClientFactory",
    "PooledSession",
    "SessionPool",
    "create_if_missing",
    "get_pool",
    "install_pool",
]

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


@dataclass(frozen=True, slots=True)
class _SessionKey:
    client: _ClientKey
    basin: str
    stream: str
    max_unacked_bytes: int
    max_unacked_batches: int


@dataclass(slots=True)
class _ClientEntry:
    client: S2
    """For unary calls (stream creation, reads, ledger appends): the SDK retries them."""
    session_client: S2 | None
    """For append sessions: the SDK does not retry them; `_write.task.appender` does (see module docstring).
    Created on first use; closed when idle."""
    idle_timeout_s: float
    last_used: float
    leased: int = 0
    ensured: set[tuple[str, str]] = field(default_factory=set)
    """(basin, stream) this process created or found: a routed stream is created once per process."""


@dataclass(slots=True, eq=False)
class PooledSession:
    """An append session leased from the pool. Return it with `SessionPool.release`."""

    key: _SessionKey
    session: AppendSession
    stream: S2Stream
    last_used: float


CREATE_CONCURRENCY: Final = 16
"""Streams created at once by `SessionPool.ensure_streams` (a routed batch may name many new streams)."""

DELETION_WAIT: Final = Patience(timeout_s=33.0, backoff=Backoff(first=0.1, cap=2.0, jitter=False))
"""How long a create waits for a deletion of the same name to complete."""


async def create_if_missing(basin: S2Basin, stream: str, config: StreamConfig | None = None) -> None:
    """Create `stream` with `config` (the basin's defaults for the rest) unless it exists; one that exists is
    left as it is.

    A create, not an ensure: S2's ensure (``PUT``) sets an existing stream's config to the one it asks for
    merged with the basin's defaults, so ensuring a stream with no config would reset one a user configured
    (infinite retention, ``arrival`` timestamps) to the defaults. 409 ``resource_already_exists`` is the
    answer that it exists. A name still being deleted (409 ``stream_deletion_pending``) is created once the
    deletion completes, waiting at most `DELETION_WAIT`; after that the 409 is raised."""

    async def create() -> None:
        try:
            await basin.create_stream(stream, config=config)
        except S2ServerError as exc:
            if not (exc.status_code == 409 and exc.code == "resource_already_exists"):
                raise

    await patiently(
        DELETION_WAIT,
        f"creating stream {stream!r} (its deletion is pending)",
        create,
        retry_on=is_stream_deleting,
    )


def make_client(cfg: S2Config, *, sdk_retries: bool = True) -> S2:
    """A new SDK client for `cfg` (call on the loop); with `sdk_retries`, the SDK retries requests."""
    client: S2 = S2(
        cfg.access_token,
        endpoints=Endpoints(account=cfg.account_endpoint, basin=cfg.basin_endpoint),
        timeout=Timeout(
            request=timedelta(milliseconds=cfg.request_timeout_ms),
            connection=timedelta(milliseconds=cfg.connect_timeout_ms),
        ),
        retry=Retry(
            max_attempts=cfg.max_retries + 1 if sdk_retries else 1,
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

    def __call__(self, cfg: S2Config, *, sdk_retries: bool = True) -> S2: ...


class SessionPool:
    """Process-wide pool of SDK clients and idle append sessions. Use only on the runtime loop."""

    def __init__(self, client_factory: ClientFactory = make_client) -> None:
        self._make_client = client_factory
        self._clients: dict[_ClientKey, _ClientEntry] = {}
        self._idle: dict[_SessionKey, list[PooledSession]] = {}
        self._reaper: asyncio.Task[None] | None = None

    # -- clients -------------------------------------------------------------------------------------

    def client(self, cfg: S2Config) -> S2:
        """The shared client for `cfg`'s endpoints and token (created on first use; never closed by
        eviction, so callers may keep it), for unary calls retried by the SDK."""
        return self._client_entry(cfg).client

    def _client_entry(self, cfg: S2Config) -> _ClientEntry:
        key = _ClientKey.of(cfg)
        entry = self._clients.get(key)
        now = time.monotonic()
        if entry is None:
            entry = _ClientEntry(self._make_client(cfg), None, cfg.session_idle_timeout_ms / 1000, now)
            self._clients[key] = entry
        entry.last_used = now
        self._start_reaper()
        return entry

    async def ensure_stream(self, cfg: S2Config, stream: str) -> None:
        """Create `stream` in `cfg.basin` if missing (once per client and stream), never changing one that
        exists (see `create_if_missing`); retried until the delivery deadline (a create is idempotent)."""
        entry = self._client_entry(cfg)
        if (cfg.basin, stream) in entry.ensured:
            return
        basin = entry.client.basin(cfg.basin)
        await patiently(
            Patience.of(cfg), f"creating stream {stream!r}", lambda: create_if_missing(basin, stream)
        )
        entry.ensured.add((cfg.basin, stream))

    async def ensure_streams(self, cfg: S2Config, streams: Iterable[str]) -> None:
        """`ensure_stream` for several streams, at most `CREATE_CONCURRENCY` requests at a time."""
        gate = asyncio.Semaphore(CREATE_CONCURRENCY)

        async def one(stream: str) -> None:
            async with gate:
                await self.ensure_stream(cfg, stream)

        await asyncio.gather(*(one(s) for s in dict.fromkeys(streams)))

    def forget_stream(self, cfg: S2Config, stream: str) -> None:
        """`stream` answered 404 after this process ensured it (deleted since: S2's ``delete_on_empty``, or
        an operator): the next `ensure_stream` asks S2 again instead of trusting the cache."""
        self._client_entry(cfg).ensured.discard((cfg.basin, stream))

    # -- sessions ------------------------------------------------------------------------------------

    async def acquire(self, cfg: S2Config, stream: str) -> PooledSession:
        """Lease an open append session to `stream` (a warm idle one if any, else a new one)."""
        entry = self._client_entry(cfg)
        key = _SessionKey(
            _ClientKey.of(cfg),
            cfg.basin,
            stream,
            max(cfg.max_inflight_bytes, ONE_MIB),
            cfg.max_inflight_requests,
        )
        idle = self._idle.get(key)
        entry.leased += 1
        if idle:
            pooled = idle.pop()
            pooled.last_used = time.monotonic()
            return pooled
        if entry.session_client is None:
            entry.session_client = self._make_client(cfg, sdk_retries=False)
        s2_stream = entry.session_client.basin(cfg.basin).stream(stream)
        try:
            session = s2_stream.append_session(
                max_unacked_bytes=key.max_unacked_bytes, max_unacked_batches=key.max_unacked_batches
            )
        except BaseException:
            entry.leased -= 1
            raise
        log.debug("opened append session basin=%s stream=%s", cfg.basin, stream)
        return PooledSession(key, session, s2_stream, time.monotonic())

    async def release(self, pooled: PooledSession, *, healthy: bool) -> None:
        """Return a leased session: kept warm if `healthy`, else closed and forgotten."""
        entry = self._clients.get(pooled.key.client)
        if entry is not None:
            entry.leased = max(0, entry.leased - 1)
            entry.last_used = time.monotonic()
        if healthy and entry is not None:
            pooled.last_used = time.monotonic()
            self._idle.setdefault(pooled.key, []).append(pooled)
        else:
            await _close_session(pooled, grace_s=1.0)

    # -- eviction ------------------------------------------------------------------------------------

    def _start_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # called off the loop (e.g. `client()` from a driver thread): next time
                return
            self._reaper = loop.create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        while any(e.session_client is not None for e in self._clients.values()) or self._idle:
            interval = min(e.idle_timeout_s for e in self._clients.values())
            await asyncio.sleep(max(0.5, interval / 2))
            await self.evict_idle()

    async def evict_idle(self, *, now: float | None = None) -> int:
        """Close sessions and clients idle longer than their timeout; returns how many were closed."""
        now = time.monotonic() if now is None else now
        closed = 0
        for key in list(self._idle):
            timeout = self._clients[key.client].idle_timeout_s if key.client in self._clients else 0.0
            keep: list[PooledSession] = []
            for pooled in self._idle[key]:
                if now - pooled.last_used >= timeout:
                    await _close_session(pooled)
                    closed += 1
                else:
                    keep.append(pooled)
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]
        busy = {k.client for k in self._idle}
        for ckey, entry in self._clients.items():
            if (
                entry.session_client is not None
                and ckey not in busy
                and entry.leased == 0
                and now - entry.last_used >= entry.idle_timeout_s
            ):
                # The unary client stays: callers of `client()` may hold it (the SDK reaps its idle
                # connections itself); only the session client and its connection go.
                await _close_client(entry.session_client)
                entry.session_client = None
                closed += 1
        return closed

    async def close_all(self) -> None:
        """Close every idle session and every client (leased sessions are their writers' to release)."""
        for sessions in self._idle.values():
            for pooled in sessions:
                await _close_session(pooled)
        self._idle.clear()
        for entry in self._clients.values():
            await _close_client(entry.client)
            if entry.session_client is not None:
                await _close_client(entry.session_client)
        self._clients.clear()
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None

    def stats(self) -> dict[str, Any]:
        """Counts for tests and debugging: clients, idle sessions, leased sessions."""
        return {
            "clients": len(self._clients),
            "idle_sessions": sum(len(v) for v in self._idle.values()),
            "leased": sum(e.leased for e in self._clients.values()),
        }


async def _close_session(pooled: PooledSession, grace_s: float = 10.0) -> None:
    # A timed-out close() is cancelled, which cancels the session's runner task with it.
    try:
        await asyncio.wait_for(pooled.session.close(), timeout=grace_s)
    except Exception as exc:  # a poisoned session re-raises its error on close; it is already reported
        log.debug("closing append session stream=%s: %s", pooled.key.stream, type(exc).__name__)


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
    for each simulated process: a new process starts with no clients, sessions or cached streams)."""
    global _pool, _pool_pid
    _pool, _pool_pid = pool, os.getpid()
