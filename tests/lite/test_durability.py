"""Durability with a data directory: restart keeps everything, and SIGKILL loses no acknowledged record (an
ack only once durable, as s2-lite: lite/src/backend/streamer.rs, on_db_durable_seq_advanced)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from pathlib import Path

import pytest
from s2_sdk import (
    AppendAck,
    AppendInput,
    BasinConfig,
    CommandRecord,
    FencingTokenMismatchError,
    ReadLimit,
    Record,
    S2ClientError,
    S2ServerError,
    SeqNum,
    StreamConfig,
)

from s2_sink.lite import LiteServer
from tests.lite._sdk import client, run


async def _read_all(srv: LiteServer, basin: str, stream: str) -> list[tuple[int, bytes]]:
    async with client(srv) as s2:
        st = s2.basin(basin).stream(stream)
        tail = (await st.check_tail()).seq_num
        out: list[tuple[int, bytes]] = []
        if tail:
            async for rb in st.read_session(start=SeqNum(0), limit=ReadLimit(count=tail)):
                out += [(r.seq_num, r.body) for r in rb.records]
        return out


def test_restart_keeps_records_configs_fencing_and_trim(tmp_path: Path) -> None:
    """After a clean stop and a start on the same directory, basins, stream configs, records, timestamps,
    the fencing token and the trim point are as before; deleted streams stay deleted."""

    async def before(srv: LiteServer) -> list[int]:
        async with client(srv) as s2:
            await s2.create_basin("durable-basin", config=BasinConfig(create_stream_on_append=True))
            b = s2.basin("durable-basin")
            await b.create_stream("cfg", config=StreamConfig(retention_policy="infinite"))
            await b.create_stream("gone")
            await b.delete_stream("gone")
            st = b.stream("s")
            await st.append(
                AppendInput(records=[Record(b"a", headers=[(b"h", b"1")]), Record(b"b", timestamp=1)])
            )
            await st.append(AppendInput(records=[CommandRecord.fence("fence-1"), CommandRecord.trim(1)]))
            await st.append(AppendInput(records=[Record(b"c")], fencing_token="fence-1"))
            return [r.timestamp for r in (await st.read(start=SeqNum(0))).records]

    async def after(srv: LiteServer, stamps: list[int]) -> None:
        async with client(srv) as s2:
            b = s2.basin("durable-basin")
            assert (await s2.get_basin_config("durable-basin")).create_stream_on_append is True
            assert sorted(s.name for s in (await b.list_streams()).items) == ["cfg", "s"]
            assert (await b.get_stream_config("cfg")).retention_policy == "infinite"
            st = b.stream("s")
            got = (await st.read(start=SeqNum(0))).records
            assert [r.seq_num for r in got] == [1, 2, 3, 4]
            assert got[0].body == b"b"
            assert got[-1].body == b"c"
            assert [r.timestamp for r in got] == stamps
            with pytest.raises(FencingTokenMismatchError) as err:
                await st.append(AppendInput(records=[Record(b"d")], fencing_token="zombie"))
            assert err.value.expected_fencing_token == "fence-1"
            ack = await st.append(AppendInput(records=[Record(b"d")], match_seq_num=5))
            assert ack.end.seq_num == 6

    with LiteServer(data_dir=tmp_path) as srv:
        stamps = run(before(srv))
    with LiteServer(data_dir=tmp_path) as srv:
        run(after(srv, stamps))


def test_torn_log_tail_is_dropped_on_restart(tmp_path: Path) -> None:
    """Garbage after the last complete log entry (a write cut short) is truncated; earlier entries survive."""
    with LiteServer(data_dir=tmp_path) as srv:
        run(_append_batches(srv, "torn-basin-1", 3))
    log = tmp_path / "lite.log"
    size = log.stat().st_size
    with log.open("ab") as f:
        f.write(b"\x00\x00\x10\x00partial")
    with LiteServer(data_dir=tmp_path) as srv:
        got = run(_read_all(srv, "torn-basin-1", "s"))
        assert len(got) == 30
        run(_append_batches(srv, "torn-basin-1", 1, ensure=False))
    assert log.stat().st_size > size


async def _append_batches(srv: LiteServer, basin: str, n: int, *, ensure: bool = True) -> None:
    async with client(srv) as s2:
        if ensure:
            await s2.ensure_basin(basin, config=BasinConfig(create_stream_on_append=True))
        st = s2.basin(basin).stream("s")
        for i in range(n):
            await st.append(AppendInput(records=[Record(b"%d-%d" % (i, j)) for j in range(10)]))


@pytest.mark.faults
def test_sigkill_loses_no_acknowledged_record(tmp_path: Path) -> None:
    """A subprocess server is SIGKILLed while a pipelined session appends; after a restart on the same
    directory every acknowledged batch is present, in order, byte for byte, with no gaps."""
    srv = LiteServer(subprocess=True, data_dir=tmp_path).start()
    acked: list[tuple[int, int, int]] = []  # (batch index, start seq, end seq)

    async def write() -> None:
        async with client(srv) as s2:
            await s2.ensure_basin("kill-basin-01", config=BasinConfig(create_stream_on_append=True))
            st = s2.basin("kill-basin-01").stream("s")
            waiters = []

            async def record(idx: int, ticket: Awaitable[AppendAck]) -> None:
                ack = await ticket
                acked.append((idx, ack.start.seq_num, ack.end.seq_num))

            with contextlib.suppress(S2ClientError, S2ServerError):
                async with st.append_session() as sess:
                    for b in range(100_000):
                        inp = AppendInput(records=[Record(b"%d-%d" % (b, i)) for i in range(100)])
                        waiters.append(asyncio.ensure_future(record(b, await sess.submit(inp))))
                        if b % 10 == 0:
                            await asyncio.sleep(0.002)  # let acks arrive while appends stay in flight
                        if len(acked) >= 50 and srv.process is not None:
                            srv.kill()
            await asyncio.gather(*waiters, return_exceptions=True)

    try:
        run(asyncio.wait_for(write(), 60))
        assert len(acked) > 10, "the server should have acknowledged some batches before the kill"
        srv.start()
        got = run(_read_all(srv, "kill-basin-01", "s"))
    finally:
        srv.stop()
    assert [seq for seq, _ in got] == list(range(len(got)))
    for idx, start, end in acked:
        assert end <= len(got)
        assert [body for _, body in got[start:end]] == [b"%d-%d" % (idx, i) for i in range(100)]
