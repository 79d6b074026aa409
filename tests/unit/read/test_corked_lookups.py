"""A read's planning asks many streams for their tails: the requests started together leave in one socket
write (`sdk.get_corked`), over the pool's own connection, and each answer lands with its stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from s2_sink._read.planning import lookups as _lookups
from s2_sink._transport import runtime as _runtime
from s2_sink._transport import sdk
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config
from s2_sink.lite import LiteServer

STREAMS = 16

_HEADERS = 1  # the HTTP/2 frame type (RFC 9113 section 6.2)


def _append(endpoint: str, basin: str, stream: str, n: int) -> None:
    with httpx.Client(http1=False, http2=True, timeout=10.0) as client:
        resp = client.post(
            f"{endpoint}/v1/streams/{stream}/records",
            json={"records": [{"body": f"r{i}"} for i in range(n)]},
            headers={"authorization": "Bearer test", "s2-basin": basin},
        )
    resp.raise_for_status()


def _count_request_writes(cfg: S2Config) -> list[int]:
    """Counts, from now on, the socket writes of the pool's connection for `cfg` that start with a
    HEADERS frame (a request's; the connection's other writes are window updates and settings acks)."""

    async def connection() -> Any:
        (conn,) = list(sdk.pooled_connections(sdk.basin_transport(get_pool().client(cfg), cfg.basin)))
        return conn

    conn = _runtime.run(connection())
    writes: list[int] = []
    write: Callable[[bytes], None] = conn._writer.write

    def counting(data: bytes) -> None:
        if len(data) >= 9 and data[3] == _HEADERS:
            writes.append(len(data))
        write(data)

    conn._writer.write = counting
    return writes


def test_tail_lookups_started_together_leave_in_one_socket_write(lite: LiteServer, basin: str) -> None:
    """16 streams' tails looked up at once: one socket write carries the 16 requests (a write each
    before), and each stream gets its own tail; a stream gone since the listing is left out on request."""
    names = [f"tails-{i:02d}" for i in range(STREAMS)]
    for i, name in enumerate(names):
        _append(lite.endpoint, basin, name, i + 1)
    # A token of its own gives the test a client (and one connection) of its own in the process-wide pool.
    cfg = S2Config(
        basin=basin, account_endpoint=lite.endpoint, basin_endpoint=lite.endpoint, access_token=f"t-{basin}"
    )
    assert _lookups.tails(cfg, names[:1]) == {names[0]: 1}  # connects

    writes = _count_request_writes(cfg)
    found = _lookups.tails(cfg, names)

    assert len(writes) == 1, f"{len(writes)} socket writes for {STREAMS} tail lookups"
    assert found == {name: i + 1 for i, name in enumerate(names)}
    assert _lookups.tails(cfg, [*names[:2], "tails-gone"], missing_ok=True) == {names[0]: 1, names[1]: 2}
