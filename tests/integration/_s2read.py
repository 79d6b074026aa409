"""Reading streams back with the SDK, for the writer's tests."""

from __future__ import annotations

import asyncio

from s2_sdk import S2, Endpoints, ReadLimit, SeqNum, SequencedRecord


def read_stream(endpoint: str, basin: str, stream: str, token: str = "test") -> list[SequencedRecord]:
    """Every record of `stream` (command records excluded), read with unary reads up to the tail."""

    async def main() -> list[SequencedRecord]:
        out: list[SequencedRecord] = []
        async with S2(token, endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
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

    return asyncio.run(main())


def list_streams(endpoint: str, basin: str, prefix: str = "", token: str = "test") -> list[str]:
    """Names of the streams of `basin` starting with `prefix`."""

    async def main() -> list[str]:
        async with S2(token, endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
            page = await s2.basin(basin).list_streams(prefix=prefix)
            return [s.name for s in page.items]

    return asyncio.run(main())
