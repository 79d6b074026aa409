"""What a Python process keeps for S2: one background asyncio event loop driving the async SDK from sync code
(the SDK's connections, locks and futures are bound to the loop that made them), and the warm SDK clients on
it (`SessionPool`), shared by the tasks a reused Python worker runs one after another. A forked child starts
its own loop. The pool is touched only from the loop (no locks); clients are keyed by everything that shapes
them (endpoints, a hash of the token, timeouts, retry settings, compression) and closed with the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import threading
from collections.abc import Awaitable, Coroutine, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, Protocol, TypeVar

from s2_sdk import (
    S2,
    AppendRetryPolicy,
    Compression,
    Endpoints,
    Retry,
    S2Basin,
    S2ServerError,
    StreamConfig,
    Timeout,
)

from s2_sink._transport.explain import is_stream_deleting
from s2_sink._transport.retry import Backoff, Patience, patiently
from s2_sink.config import S2Config

__all__ = [
    "CREATE_CONCURRENCY",
    "DELETION_WAIT",
    "ClientFactory",
    "SessionPool",
    "create_if_missing",
    "gather_bounded",
    "get_loop",
    "get_pool",
    "in_loop_thread",
    "install_pool",
    "make_client",
    "run",
]

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None
_pid: int | None = None


def get_loop() -> asyncio.AbstractEventLoop:
    """The process-wide loop, started on first use (and again in a forked child)."""
    global _loop, _thread, _pid
    loop = _loop
    if loop is not None and _pid == os.getpid() and _thread is not None and _thread.is_alive():
        return loop
    with _lock:
        if _loop is not None and _pid == os.getpid() and _thread is not None and _thread.is_alive():
            return _loop
        new_loop = asyncio.new_event_loop()  # takes work before it runs: nothing waits for it to start
        thread = threading.Thread(target=new_loop.run_forever, name="s2-sink-loop", daemon=True)
        thread.start()
        _loop, _thread, _pid = new_loop, thread, os.getpid()
        return new_loop


def in_loop_thread() -> bool:
    """Whether the caller runs on the background loop's thread (where `run` would deadlock)."""
    return _thread is not None and threading.current_thread() is _thread


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run `coro` on the background loop and wait for its result from the calling (task) thread.

    On timeout or interruption the coroutine is cancelled so it does not keep running unobserved.
    """
    if in_loop_thread():
        coro.close()
        raise RuntimeError("s2_sink._transport.runtime.run() called from the event-loop thread")
    future = asyncio.run_coroutine_threadsafe(coro, get_loop())
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise


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
            hashlib.sha256(cfg.access_token.encode()).hexdigest()[:16],  # the token, not kept
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
    """(basin, stream) this process created or found: a routed stream is created once per process."""


CREATE_CONCURRENCY: Final = 16
"""Streams created at once by `SessionPool.ensure_streams` (a routed batch may name many new streams)."""

DELETION_WAIT: Final = Patience(timeout_s=33.0, backoff=Backoff(first=0.1, cap=2.0, jitter=False))
"""How long a create waits for a deletion of the same name to complete."""


async def create_if_missing(basin: S2Basin, stream: str, config: StreamConfig | None = None) -> bool:
    """Create `stream` with `config` (the basin's defaults for the rest) unless it exists; one that exists is
    left as it is. True if this call created it (False also when a create it retried had landed).

    A create, not an ensure: S2's ensure (``PUT``) sets an existing stream's config to the one it asks for
    merged with the basin's defaults, so ensuring a stream with no config would reset one a user configured
    (infinite retention, ``arrival`` timestamps) to the defaults. 409 ``resource_already_exists`` is the
    answer that it exists. A name still being deleted (409 ``stream_deletion_pending``) is created once the
    deletion completes, waiting at most `DELETION_WAIT`; after that the 409 is raised."""

    async def create() -> bool:
        try:
            await basin.create_stream(stream, config=config)
        except S2ServerError as exc:
            if not (exc.status_code == 409 and exc.code == "resource_already_exists"):
                raise
            return False
        return True

    return await patiently(
        DELETION_WAIT,
        f"creating stream {stream!r} (its deletion is pending)",
        create,
        retry_on=is_stream_deleting,
    )


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


async def gather_bounded(aws: Iterable[Awaitable[T]], limit: int) -> list[T]:
    """`asyncio.gather` of `aws`, at most `limit` of them running at once; the first failure cancels the
    rest (they would run on, on the shared loop, after their caller gave up)."""
    gate = asyncio.Semaphore(limit)

    async def one(aw: Awaitable[T]) -> T:
        async with gate:
            return await aw

    def start(aw: Awaitable[T]) -> asyncio.Future[T]:
        task = asyncio.ensure_future(one(aw))
        if asyncio.iscoroutine(aw):  # one cancelled before its turn, or before its task's first step, never
            task.add_done_callback(lambda _: aw.close())  # ran: closed, not left unawaited
        return task

    tasks = [start(aw) for aw in aws]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        raise


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

    async def ensure_stream(self, cfg: S2Config, stream: str) -> bool:
        """Create `stream` in `cfg.basin` if missing (once per client and stream), never changing one that
        exists (see `create_if_missing`); retried until the delivery deadline (a create is idempotent).
        True if this call created it."""
        entry = self._client_entry(cfg)
        if (cfg.basin, stream) in entry.ensured:
            return False
        basin = entry.client.basin(cfg.basin)
        created = await patiently(
            Patience.of(cfg), f"creating stream {stream!r}", lambda: create_if_missing(basin, stream)
        )
        entry.ensured.add((cfg.basin, stream))
        return created

    async def ensure_streams(self, cfg: S2Config, streams: Iterable[str]) -> list[str]:
        """`ensure_stream` for several streams, at most `CREATE_CONCURRENCY` requests at a time; those this
        call created."""
        entry = self._client_entry(cfg)
        missing = [s for s in dict.fromkeys(streams) if (cfg.basin, s) not in entry.ensured]
        created = await gather_bounded((self.ensure_stream(cfg, s) for s in missing), CREATE_CONCURRENCY)
        return [s for s, c in zip(missing, created, strict=True) if c]

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
