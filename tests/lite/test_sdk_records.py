"""Records through the official SDK: unary append/read, check_tail, sessions, producer."""

from __future__ import annotations

from datetime import timedelta

from s2_sdk import AppendInput, Batching, ReadLimit, Record, SeqNum

from s2_sink.lite import LiteServer
from tests.lite._sdk import client, run


def test_unary_append_then_read_back(lite: LiteServer, basin: str) -> None:
    """A unary append is acked with contiguous seq_nums and reads back byte-identical with headers.

    As s2-lite: lite/src/handlers/v1/records.rs, append and read."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("a/b c")
            ack = await st.append(AppendInput(records=[Record(b"hi", headers=[(b"k", b"v")]), Record(b"")]))
            assert (ack.start.seq_num, ack.end.seq_num, ack.tail.seq_num) == (0, 2, 2)
            batch = await st.read(start=SeqNum(0))
            assert [(r.seq_num, r.body, r.headers) for r in batch.records] == [
                (0, b"hi", [(b"k", b"v")]),
                (1, b"", []),
            ]
            tail = await st.check_tail()
            assert tail.seq_num == 2
            assert tail.timestamp == ack.end.timestamp

    run(main())


def test_pipelined_session_and_producer_ack_in_order(lite: LiteServer, basin: str) -> None:
    """
    An append session acks each pipelined batch in order; a producer with match_seq_num continues after it.

    As s2-lite: lite/src/backend/append.rs, append_session."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            batches = [[Record(b"r%d" % i) for i in range(1000)] for _ in range(5)]
            async with st.append_session() as sess:
                tickets = [await sess.submit(AppendInput(records=b)) for b in batches]
                acks = [await t for t in tickets]
            assert [a.start.seq_num for a in acks] == [0, 1000, 2000, 3000, 4000]
            assert acks[-1].end.seq_num == 5000
            async with st.producer(
                batching=Batching(linger=timedelta(milliseconds=5)), match_seq_num=5000
            ) as p:
                tickets2 = [await p.submit(Record(b"p")) for _ in range(2500)]
                await p.flush()
                last = await tickets2[-1]
            assert last.seq_num == 7499
            n = 0
            async for rb in st.read_session(start=SeqNum(0), limit=ReadLimit(count=7500)):
                assert [r.seq_num for r in rb.records] == list(range(n, n + len(rb.records)))
                n += len(rb.records)
            assert n == 7500

    run(main())
