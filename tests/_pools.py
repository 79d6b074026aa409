"""The worker process a test stands in for, as its pool of clients and streams met: its own, or new."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from s2_sink._transport import runtime
from s2_sink._transport.runtime import SessionPool, get_pool, install_pool


@contextmanager
def own_pool() -> Iterator[None]:
    """A pool of the test's own (no clients, no streams met, as in a worker process new to them); the
    process's put back after."""
    saved = get_pool()
    install_pool(SessionPool())
    try:
        yield
    finally:
        runtime.run(get_pool().close_all())
        install_pool(saved)


def new_process() -> None:
    """What follows runs as in another worker process, new to the streams: the pool closed and replaced."""
    runtime.run(get_pool().close_all())
    install_pool(SessionPool())
