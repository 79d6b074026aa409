"""One background asyncio event loop per Python process, for driving the async S2 SDK from sync code.

Spark calls our executor code synchronously, in the task's thread. The SDK is async-only and its
connections, locks and futures are bound to the loop that created them, so the process keeps a single
long-lived loop on a daemon thread and every SDK object lives there. Spark reuses Python workers across
tasks and micro-batches (``spark.python.worker.reuse``), so connections made by one task stay warm for
the next. A forked child (Spark's daemon forks workers) starts its own loop: loops never cross a fork.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["get_loop", "in_loop_thread", "run"]

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
        new_loop = asyncio.new_event_loop()
        ready = threading.Event()

        def _serve() -> None:
            asyncio.set_event_loop(new_loop)
            new_loop.call_soon(ready.set)
            new_loop.run_forever()

        thread = threading.Thread(target=_serve, name="s2-sink-loop", daemon=True)
        thread.start()
        ready.wait()
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
