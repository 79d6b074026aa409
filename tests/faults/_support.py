"""Helpers shared by the exactly-once and fault-injection tests (not tests themselves)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import s2_sdk
from s2_sdk import (
    S2,
    AppendInput,
    CommandRecord,
    Endpoints,
    ReadLimit,
    ReadUnwrittenError,
    S2ServerError,
    SeqNum,
    SequencedRecord,
)

from s2_sink._exactly_once.ledger import Ledger
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on a fresh event loop (test-side SDK calls, independent of the library's loop)."""
    return asyncio.run(coro)


def new_basin_name() -> str:
    return f"t-{uuid.uuid4().hex[:16]}"


def client(endpoint: str) -> S2:
    return S2("test-token", endpoints=Endpoints(account=endpoint, basin=endpoint))


async def create_basin(endpoint: str, basin: str, streams: list[str] = ()) -> None:  # type: ignore[assignment]
    async with client(endpoint) as s2:
        await s2.ensure_basin(basin)
        for name in streams:
            await s2.basin(basin).ensure_stream(name)


def make_basin(endpoint: str, streams: list[str] | tuple[str, ...] = ()) -> str:
    """A fresh basin with `streams` created."""
    name = new_basin_name()
    run(create_basin(endpoint, name, list(streams)))
    return name


def cfg_for(endpoint: str, basin: str, stream: str | None = "events", **kw: Any) -> S2Config:
    return S2Config(
        basin=basin,
        stream=stream,
        access_token="test-token",
        account_endpoint=endpoint,
        basin_endpoint=endpoint,
        **kw,
    )


async def read_all(
    endpoint: str, basin: str, stream: str, *, commands: bool = False
) -> list[SequencedRecord]:
    """Every record of `stream` (without command records unless asked)."""
    out: list[SequencedRecord] = []
    async with client(endpoint) as s2:
        st = s2.basin(basin).stream(stream)
        tail = (await st.check_tail()).seq_num
        pos = 0
        while pos < tail:
            try:
                batch = await st.read(start=SeqNum(pos), limit=ReadLimit(count=min(1000, tail - pos)))
            except ReadUnwrittenError:
                break
            if not batch.records:
                break
            out.extend(batch.records)
            pos = batch.records[-1].seq_num + 1
    if not commands:
        out = [r for r in out if not (len(r.headers) == 1 and r.headers[0][0] == b"")]
    return out


async def list_streams(endpoint: str, basin: str) -> list[str]:
    async with client(endpoint) as s2:
        page = await s2.basin(basin).list_streams()
        return [s.name for s in page.items]


def fail_one_read(monkeypatch: Any) -> list[int]:
    """The SDK's next stream read answers 503 (the lite server injects faults into appends only); the list
    holds how many failures are left."""
    real = s2_sdk.S2Stream.read
    left = [1]

    async def flaky(self: s2_sdk.S2Stream, *args: Any, **kwargs: Any) -> Any:
        if left[0]:
            left[0] -= 1
            raise S2ServerError("unavailable", "injected transient failure", 503)
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(s2_sdk.S2Stream, "read", flaky)
    return left


async def trim_behind_base(cfg: S2Config, writer_id: str, query_id: str) -> tuple[Ledger, int]:
    """A ledger of `writer_id` with commits of batches 0 ("a") and 1 ("b"), trimmed by hand up to its last
    state record: the record stays, the earlier commits its ends fold from are gone. Returns the ledger as
    written and that record's seq_num."""
    basin = get_pool().client(cfg).basin(cfg.basin)
    led = Ledger(basin, writer_id, cfg=cfg)
    await led.load()
    await led.append(led.opened("run", query_id))
    await led.append(led.committed(0, {"a": 5}))
    await led.append(led.committed(1, {"b": 7}))
    at, tail = led.state_at, led.tail
    assert at is not None
    assert tail is not None
    assert led.state.base < at
    await basin.stream(led.name).append(AppendInput(records=[CommandRecord.trim(at)], match_seq_num=tail))
    for _ in range(40):  # a trim may be applied in the background
        if [seq async for seq, _ in led.records(0, tail)] == [at]:
            break
        await asyncio.sleep(0.05)
    return led, at
