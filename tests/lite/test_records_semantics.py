"""Record semantics through the official SDK: reads, 416, fencing, match_seq_num, commands, timestamps."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from s2_sdk import (
    AppendInput,
    BasinConfig,
    CommandRecord,
    FencingTokenMismatchError,
    ReadBatch,
    ReadLimit,
    ReadUnwrittenError,
    Record,
    S2ServerError,
    S2Stream,
    SeqNum,
    SeqNumMismatchError,
    StreamConfig,
    TailOffset,
    Timestamp,
    Timestamping,
    TimestampingMode,
)

from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.lite._sdk import client, run


def _recs(n: int, prefix: bytes = b"r", ts: int | None = None) -> list[Record]:
    return [Record(prefix + b"%d" % i, timestamp=ts) for i in range(n)]


async def _trimmed(st: S2Stream, start: int, first_kept: int, **read: Any) -> ReadBatch:
    """A read from `start` once a trim to `first_kept` took effect. S2 removes trimmed records in the
    background (s2-lite: bgtasks/stream_trim.rs), so they may stay readable for a moment; the lite server
    hides them at once. Every read on the way must be a 200 (a ReadUnwrittenError fails the test)."""
    deadline = time.monotonic() + 10
    while True:
        got = await st.read(start=SeqNum(start), **read)
        if not got.records or got.records[0].seq_num >= first_kept:
            return got
        assert time.monotonic() < deadline, f"records below {first_kept} still readable after 10 s"
        await asyncio.sleep(0.1)


def test_read_starts_by_seq_num_timestamp_and_tail_offset(lite: LiteServer, basin: str) -> None:
    """seq_num, timestamp and tail_offset starts resolve to the right first record.

    As s2-lite: lite/src/backend/read.rs, read_start_seq_num and resolve_timestamp; api/src/v1/stream/mod.rs,
    ReadStart."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            await st.append(AppendInput(records=[Record(b"a", timestamp=10), Record(b"b", timestamp=20)]))
            await st.append(AppendInput(records=[Record(b"c", timestamp=30)]))
            assert [r.body for r in (await st.read(start=SeqNum(1))).records] == [b"b", b"c"]
            assert [r.body for r in (await st.read(start=Timestamp(15))).records] == [b"b", b"c"]
            assert [r.body for r in (await st.read(start=Timestamp(30))).records] == [b"c"]
            assert [r.body for r in (await st.read(start=TailOffset(2))).records] == [b"b", b"c"]
            assert [r.body for r in (await st.read(start=TailOffset(99))).records] == [b"a", b"b", b"c"]
            assert [r.timestamp for r in (await st.read(start=SeqNum(0))).records] == [10, 20, 30]

    run(main())


def test_read_limits_count_bytes_until(lite: LiteServer, basin: str) -> None:
    """count and (metered) bytes limits and the exclusive until timestamp bound a unary read; stored records
    come without a tail, even when they reach it (lite/src/backend/read.rs, read_session: only live batches
    carry one)."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            await st.append(AppendInput(records=[Record(b"x" * 92, timestamp=t) for t in range(1, 11)]))
            assert len((await st.read(start=SeqNum(0), limit=ReadLimit(count=3))).records) == 3
            # Each record meters 8 + 92 = 100 bytes.
            assert len((await st.read(start=SeqNum(0), limit=ReadLimit(bytes=350))).records) == 3
            got = await st.read(start=SeqNum(0), until_timestamp=5)
            assert [r.timestamp for r in got.records] == [1, 2, 3, 4]
            got = await st.read(start=SeqNum(8), limit=ReadLimit(count=100))
            assert [r.seq_num for r in got.records] == [8, 9]
            assert got.tail is None

    run(main())


def test_unary_read_caps_at_1000_records(lite: LiteServer, basin: str) -> None:
    """A unary read returns at most 1000 records even when more are asked for.

    As s2-lite: lite/src/handlers/v1/records.rs, prepare_read (RECORD_BATCH_MAX); common/src/caps.rs."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            for _ in range(3):
                await st.append(AppendInput(records=_recs(1000)))
            got = await st.read(start=SeqNum(500), limit=ReadLimit(count=5000))
            assert [r.seq_num for r in got.records] == list(range(500, 1500))

    run(main())


def test_unary_read_caps_at_one_mib_of_whole_records(lite: LiteServer, basin: str) -> None:
    """A unary read bounded by a count alone still answers with at most 1 MiB of metered bytes, in whole
    records (the next read goes on from there), as the s2 source's reads of small ranges rely on.

    As s2-lite: lite/src/handlers/v1/records.rs, prepare_read (``into_allowance(RECORD_BATCH_MAX)``: a count
    keeps the 1 MiB); lite/src/backend/read.rs, read_session (a record that would pass the limit is left)."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            # Each record meters 8 + 200,000 bytes: five fit in 1,048,576, six do not.
            await st.append(AppendInput(records=[Record(b"x" * 200_000) for _ in range(4)]))
            await st.append(AppendInput(records=[Record(b"y" * 200_000) for _ in range(4)]))
            got = await st.read(start=SeqNum(1), limit=ReadLimit(count=7))
            assert [r.seq_num for r in got.records] == [1, 2, 3, 4, 5]
            got = await st.read(start=SeqNum(6), limit=ReadLimit(count=7))
            assert [r.seq_num for r in got.records] == [6, 7]

    run(main())


def test_416_rules(lite: LiteServer, basin: str) -> None:
    """Beyond the tail is 416 unless clamped; at the tail a read that cannot wait is 416, clamped or not.

    As s2-lite: lite/src/backend/read.rs, read_start_seq_num; common/src/stream.rs, ReadEnd::may_follow."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            await st.append(AppendInput(records=_recs(3)))
            with pytest.raises(ReadUnwrittenError) as beyond:
                await st.read(start=SeqNum(10))
            assert beyond.value.tail.seq_num == 3
            with pytest.raises(ReadUnwrittenError):
                await st.read(start=SeqNum(3))
            with pytest.raises(ReadUnwrittenError):
                await st.read(start=SeqNum(10), clamp_to_tail=True)
            with pytest.raises(ReadUnwrittenError):
                await st.read(start=TailOffset(0))
            t0 = time.monotonic()
            empty = await st.read(start=SeqNum(10), clamp_to_tail=True, wait=1)
            assert empty.records == []
            assert time.monotonic() - t0 >= 0.9

    run(main())


def test_long_poll_returns_when_records_arrive(lite: LiteServer, basin: str) -> None:
    """A unary read at the tail with wait returns as soon as an append lands.

    As s2-lite: lite/src/handlers/v1/records.rs, merge_read_session and MAX_UNARY_READ_WAIT."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            await st.append(AppendInput(records=_recs(1)))

            async def later() -> None:
                await asyncio.sleep(0.3)
                await st.append(AppendInput(records=[Record(b"late")]))

            task = asyncio.create_task(later())
            t0 = time.monotonic()
            got = await st.read(start=SeqNum(1), wait=4)
            await task
            assert [r.body for r in got.records] == [b"late"]
            assert time.monotonic() - t0 < 3

    run(main())


def test_match_seq_num_and_fencing_tokens(lite: LiteServer, basin: str) -> None:
    """match_seq_num must equal the tail (412 SeqNumMismatchError); fence records set the token that appends
    must carry (412 FencingTokenMismatchError, also when match_seq_num is wrong too), appends without a token
    pass, an empty fence clears it. Unary appends (POST), as the sink's small streams send them.

    As s2-lite: lite/src/backend/streamer.rs, sequence_records and apply_command;
    lite/src/handlers/v1/error.rs (AppendConditionFailed bodies)."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            await st.append(AppendInput(records=_recs(2), match_seq_num=0))
            with pytest.raises(SeqNumMismatchError) as sm:
                await st.append(AppendInput(records=_recs(1), match_seq_num=0))
            assert sm.value.expected_seq_num == 2
            await st.append(AppendInput(records=[CommandRecord.fence("tok-1")]))
            with pytest.raises(FencingTokenMismatchError) as fm:
                await st.append(AppendInput(records=_recs(1), fencing_token="other"))
            assert fm.value.expected_fencing_token == "tok-1"
            with pytest.raises(FencingTokenMismatchError):  # the token is checked before match_seq_num
                await st.append(AppendInput(records=_recs(1), fencing_token="other", match_seq_num=0))
            ack = await st.append(AppendInput(records=_recs(1), fencing_token="tok-1"))
            assert ack.start.seq_num == 3
            await st.append(AppendInput(records=_recs(1)))
            # A fence takes effect at its own position: records after it in the same batch are already fenced.
            await st.append(
                AppendInput(records=[CommandRecord.fence("tok-2"), Record(b"x")], fencing_token="tok-1")
            )
            with pytest.raises(FencingTokenMismatchError):
                await st.append(AppendInput(records=_recs(1), fencing_token="tok-1"))
            await st.append(AppendInput(records=[CommandRecord.fence("")], fencing_token="tok-2"))
            await st.append(AppendInput(records=_recs(1), fencing_token=""))
            assert (await st.check_tail()).seq_num == 9
            got = await st.read(start=SeqNum(0), ignore_command_records=True)
            assert len(got.records) == 6
            assert all(not r.is_command_record() for r in got.records)

    run(main())


def test_trim_hides_earlier_records(lite: LiteServer, basin: str) -> None:
    """A trim command record makes records before its target unreadable; reads start at the trim point.

    As s2-lite: lite/src/backend/streamer.rs, apply_command (a trim is capped just after its own record);
    bgtasks/stream_trim.rs."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            await st.append(AppendInput(records=_recs(5)))
            await st.append(AppendInput(records=[CommandRecord.trim(3)]))
            got = await _trimmed(st, 0, 3)
            assert [r.seq_num for r in got.records] == [3, 4, 5]
            assert got.records[-1].is_command_record()
            # A trim point beyond the trim record itself is capped just after it.
            await st.append(AppendInput(records=[CommandRecord.trim(1000)]))
            got = await _trimmed(st, 0, 7, clamp_to_tail=True, wait=1)
            assert [r.seq_num for r in got.records] == []

    run(main())


def test_invalid_command_records_are_422(lite: LiteServer, basin: str) -> None:
    """Unknown commands, over-long fencing tokens (a fence's or the input's own: 36 bytes at most) and empty
    header names mixed with others are 422 invalid; a refused unary append does not auto-create its stream,
    since S2 decodes the request before it opens the stream (api/src/v1/stream/extract.rs, AppendRequest;
    common/src/record/fencing.rs, MAX_FENCING_TOKEN_LENGTH)."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            bad = [
                Record(b"", headers=[(b"", b"nope")]),
                Record(b"x" * 37, headers=[(b"", b"fence")]),
                Record(b"1234", headers=[(b"", b"trim")]),
                Record(b"x", headers=[(b"", b"fence"), (b"k", b"v")]),
                Record(b"x", headers=[(b"", b"v"), (b"", b"v")]),
            ]
            inputs = [AppendInput(records=[Record(b"ok"), rec]) for rec in bad]
            inputs.append(AppendInput(records=[Record(b"ok")], fencing_token="t" * 37))
            for inp in inputs:
                with pytest.raises(S2ServerError) as err:
                    await st.append(inp)
                assert (err.value.status_code, err.value.code) == (422, "invalid")
            # Nothing of the rejected batches was applied, and the stream was never created.
            with pytest.raises(S2ServerError) as missing:
                await st.check_tail()
            assert (missing.value.status_code, missing.value.code) == (404, "stream_not_found")
            await st.append(AppendInput(records=[CommandRecord.fence("t" * 36)]))
            await st.append(AppendInput(records=[Record(b"ok")], fencing_token="t" * 36))

    run(main())


def test_timestamps_client_prefer_capped_and_monotonic(lite: LiteServer, basin: str) -> None:
    """client-prefer: missing timestamps get arrival time, future ones are capped at arrival, and timestamps
    never decrease.

    As s2-lite: lite/src/backend/streamer.rs, sequenced_records."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            before = int(time.time() * 1000)
            ack = await st.append(AppendInput(records=[Record(b"a"), Record(b"b", timestamp=2**50)]))
            after = int(time.time() * 1000)
            got = (await st.read(start=SeqNum(0))).records
            assert before <= got[0].timestamp <= after
            assert before <= got[1].timestamp <= after
            await st.append(AppendInput(records=[Record(b"c", timestamp=5)]))
            got = (await st.read(start=SeqNum(0))).records
            assert got[2].timestamp == got[1].timestamp == ack.end.timestamp

    run(main())


def test_timestamps_uncapped_client_require_and_arrival(lite: LiteServer) -> None:
    """uncapped keeps future client timestamps; client-require rejects a missing one (422); arrival ignores
    client timestamps.

    As s2-lite: lite/src/backend/streamer.rs, sequenced_records."""
    name = fresh_basin(lite.endpoint)

    async def main() -> None:
        async with client(lite) as s2:
            b = s2.basin(name)
            await b.create_stream(
                "unc",
                config=StreamConfig(
                    timestamping=Timestamping(mode=TimestampingMode.CLIENT_PREFER, uncapped=True)
                ),
            )
            await b.create_stream(
                "req", config=StreamConfig(timestamping=Timestamping(mode=TimestampingMode.CLIENT_REQUIRE))
            )
            await b.create_stream(
                "arr", config=StreamConfig(timestamping=Timestamping(mode=TimestampingMode.ARRIVAL))
            )
            await b.stream("unc").append(AppendInput(records=[Record(b"a", timestamp=2**50)]))
            assert (await b.stream("unc").read(start=SeqNum(0))).records[0].timestamp == 2**50
            with pytest.raises(S2ServerError) as err:
                await b.stream("req").append(AppendInput(records=[Record(b"a", timestamp=1), Record(b"b")]))
            assert (err.value.status_code, err.value.code) == (422, "invalid")
            await b.stream("req").append(AppendInput(records=[Record(b"a", timestamp=7)]))
            assert (await b.stream("req").read(start=SeqNum(0))).records[0].timestamp == 7
            await b.stream("arr").append(AppendInput(records=[Record(b"a", timestamp=7)]))
            assert (await b.stream("arr").read(start=SeqNum(0))).records[0].timestamp > 10**12

    run(main())


def test_create_stream_on_append_and_on_read(lite: LiteServer) -> None:
    """Without auto-create an append to a missing stream is 404, unary or by session; create_stream_on_append
    (either way) and create_stream_on_read create it.

    As s2-lite: lite/src/backend/core.rs, stream_handle_with_auto_create; append.rs, open_for_append; read.rs,
    open_for_read and open_for_check_tail."""
    plain = fresh_basin(lite.endpoint, create_stream_on_append=False)
    on_read = fresh_basin(lite.endpoint, create_stream_on_append=False, create_stream_on_read=True)

    async def main() -> None:
        async with client(lite) as s2:
            with pytest.raises(S2ServerError) as err:
                await s2.basin(plain).stream("s").append(AppendInput(records=_recs(1)))
            assert (err.value.status_code, err.value.code) == (404, "stream_not_found")
            with pytest.raises(S2ServerError):
                await s2.basin(plain).stream("s").check_tail()
            tail = await s2.basin(on_read).stream("r").check_tail()
            assert tail.seq_num == 0
            assert [s.name for s in (await s2.basin(on_read).list_streams()).items] == ["r"]
            with pytest.raises(S2ServerError) as err:
                async with s2.basin(plain).stream("s").append_session() as sess:
                    await (await sess.submit(AppendInput(records=_recs(1))))
            assert (err.value.status_code, err.value.code) == (404, "stream_not_found")
            await s2.reconfigure_basin(plain, config=BasinConfig(create_stream_on_append=True))
            ack = await s2.basin(plain).stream("s").append(AppendInput(records=_recs(2)))
            assert ack.end.seq_num == 2
            async with s2.basin(plain).stream("by-session").append_session() as sess:
                ack = await (await sess.submit(AppendInput(records=_recs(3))))
            assert ack.end.seq_num == 3

    run(main())


def test_an_auto_created_stream_takes_the_basin_defaults(lite: LiteServer) -> None:
    """A stream created by an append gets the basin's default config; the s2-stream-config header the SDK can
    send with it is not read (s2-lite has no code for it: lite/src/backend/core.rs,
    stream_handle_with_auto_create provisions ``OptionalStreamConfig::default()``)."""
    name = fresh_basin(lite.endpoint, default_stream_config={"retention_policy": {"age": 3600}})

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(name).stream("configured")
            cfg = StreamConfig(retention_policy="infinite")
            await st.append(AppendInput(records=[Record(b"a")], stream_config=cfg))
            got = await s2.basin(name).get_stream_config("configured")
            assert got.retention_policy == 3600

    run(main())


def test_reads_below_the_trim_point_get_what_is_left(lite: LiteServer, basin: str) -> None:
    """A read that starts below the trim point is not a read of an unwritten position: it answers 200 with the
    records left after the trim point, or none at all when the whole stream was trimmed (never 416, which is
    kept for starts past the tail); sessions likewise end cleanly after what is left.

    As s2-lite: lite/src/backend/read.rs, read_start_seq_num (416 only past the tail, or at it without
    following) and read_session (the scan skips what was trimmed)."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            await st.append(AppendInput(records=_recs(5)))
            await st.append(AppendInput(records=[CommandRecord.trim(3)]))
            got = await _trimmed(st, 1, 3, limit=ReadLimit(count=2))
            assert [r.seq_num for r in got.records] == [3, 4]
            await st.append(AppendInput(records=[CommandRecord.trim(1000)]))  # capped after itself: 7
            assert (await st.check_tail()).seq_num == 7
            for start in (0, 3, 6):
                got = await _trimmed(st, start, 7, limit=ReadLimit(count=10))
                assert (got.records, got.tail) == ([], None)
                async with st.read_session(start=SeqNum(start), limit=ReadLimit(count=10)) as session:
                    assert [b async for b in session] == []
            with pytest.raises(ReadUnwrittenError) as at_tail:
                await st.read(start=SeqNum(7), limit=ReadLimit(count=10))
            assert at_tail.value.tail.seq_num == 7

    run(main())


def test_zero_limits_read_nothing(lite: LiteServer, basin: str) -> None:
    """count=0 or bytes=0 is a limit of zero records, not "no limit": a read below the tail answers 200 with
    no records, a read at the tail that may not wait is 416, as for any bounded read
    (common/src/read_extent.rs, ReadLimit::from_count_and_bytes; read.rs, read_start_seq_num)."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            await st.append(AppendInput(records=_recs(3)))
            for limit in (ReadLimit(count=0), ReadLimit(bytes=0), ReadLimit(count=5, bytes=0)):
                assert (await st.read(start=SeqNum(0), limit=limit)).records == []
                async with st.read_session(start=SeqNum(0), limit=limit) as session:
                    assert [b async for b in session] == []
                with pytest.raises(ReadUnwrittenError):
                    await st.read(start=SeqNum(3), limit=limit)

    run(main())


def test_a_timestamp_start_past_every_record_reads_nothing(lite: LiteServer, basin: str) -> None:
    """A timestamp start above the last record's timestamp is 416 (clamped: the tail, and 416 again for a
    read that cannot wait); one at or below it that no record reaches any more (trimmed) starts at the tail
    and answers 200 with nothing: the second 416 rule is for seq_num starts only (read.rs,
    read_start_seq_num)."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("s")
            await st.append(AppendInput(records=[Record(b"a", timestamp=10), Record(b"b", timestamp=20)]))
            with pytest.raises(ReadUnwrittenError):
                await st.read(start=Timestamp(21))
            with pytest.raises(ReadUnwrittenError):
                await st.read(start=Timestamp(21), clamp_to_tail=True)
            await st.append(AppendInput(records=[CommandRecord.trim(1000)]))  # the trim record takes ts 20
            deadline = time.monotonic() + 10
            while (await st.read(start=Timestamp(20))).records:  # trimmed in the background on S2
                assert time.monotonic() < deadline, "records still readable 10 s after the trim"
                await asyncio.sleep(0.1)

    run(main())


def test_conditions_are_checked_before_timestamps(lite: LiteServer) -> None:
    """An append is judged in S2's order: the fencing token, then match_seq_num, then each record's
    timestamp, so a stale token on a client-require stream is a 412 even when a timestamp is missing too
    (lite/src/backend/streamer.rs, sequence_records then sequenced_records)."""
    name = fresh_basin(lite.endpoint)

    async def main() -> None:
        async with client(lite) as s2:
            b = s2.basin(name)
            config = StreamConfig(timestamping=Timestamping(mode=TimestampingMode.CLIENT_REQUIRE))
            await b.create_stream("req", config=config)
            st = b.stream("req")
            fence = Record(b"mine", headers=[(b"", b"fence")], timestamp=1)  # a command needs one too
            await st.append(AppendInput(records=[fence]))
            with pytest.raises(FencingTokenMismatchError):
                await st.append(AppendInput(records=[Record(b"x")], fencing_token="stale"))
            with pytest.raises(SeqNumMismatchError):
                await st.append(AppendInput(records=[Record(b"x")], fencing_token="mine", match_seq_num=9))
            with pytest.raises(S2ServerError) as missing:
                await st.append(AppendInput(records=[Record(b"x")], fencing_token="mine"))
            assert (missing.value.status_code, missing.value.code) == (422, "invalid")

    run(main())
