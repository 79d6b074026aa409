"""Reading streams back with the SDK, for the writer's tests."""

from __future__ import annotations

import asyncio
from typing import Any

from s2_sdk import S2, Endpoints, ReadLimit, SeqNum, SequencedRecord

from tests import s2_target


def _client(server: Any, token: str | None) -> S2:
    """A client for an endpoint URL (the lite server's), or for the `lite` fixture's server, ours or another
    S2 (`tests/s2_target.py`), with its token unless one is given."""
    if isinstance(server, str):
        return S2(token or "test", endpoints=Endpoints(account=server, basin=server))
    account, basin = s2_target.endpoints(server)
    return S2(token or s2_target.token(server), endpoints=Endpoints(account=account, basin=basin))


def read_stream(server: Any, basin: str, stream: str, token: str | None = None) -> list[SequencedRecord]:
    """Every record of `stream` (command records excluded), read with unary reads up to the tail."""
    return read_streams(server, basin, [stream], token)[stream]


def read_streams(
    server: Any, basin: str, streams: list[str], token: str | None = None
) -> dict[str, list[SequencedRecord]]:
    """`read_stream` of each of `streams`, on one client (each new client parses the CA bundle)."""

    async def one(s2: S2, stream: str) -> list[SequencedRecord]:
        out: list[SequencedRecord] = []
        s = s2.basin(basin).stream(stream)
        tail = (await s.check_tail()).seq_num
        pos = 0
        while pos < tail:
            batch = await s.read(start=SeqNum(pos), limit=ReadLimit(count=1000))
            if not batch.records:
                break
            out.extend(r for r in batch.records if not r.is_command_record())
            pos = batch.records[-1].seq_num + 1
        return out

    async def main() -> dict[str, list[SequencedRecord]]:
        async with _client(server, token) as s2:
            return {stream: await one(s2, stream) for stream in streams}

    return asyncio.run(main())


def list_streams(server: Any, basin: str, prefix: str = "", token: str | None = None) -> list[str]:
    """Names of the streams of `basin` starting with `prefix`."""

    async def main() -> list[str]:
        async with _client(server, token) as s2:
            page = await s2.basin(basin).list_streams(prefix=prefix)
            return [s.name for s in page.items]

    return asyncio.run(main())
