"""S2's per-stream append limits under ``throttle=True``: 429 rate_limited before anything is applied. s2-lite
has no rate limits; this is the lite server's own option, for tests of the writer's 429 handling."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from s2_sdk import AppendInput, Record, S2ServerError, SeqNum

from s2_sink.lite import LiteServer, ManualClock
from s2_sink.lite._api_errors import ApiError
from s2_sink.lite._stream import Stream
from s2_sink.lite._throttle import BATCHES_PER_SECOND, Throttle
from s2_sink.testing import fresh_basin
from tests.lite._sdk import client, run


@pytest.fixture(scope="module")
def clock() -> ManualClock:
    """The throttled server's time, standing still unless a test advances it."""
    return ManualClock()


@pytest.fixture(scope="module")
def throttled(clock: ManualClock) -> Iterator[LiteServer]:
    """A lite server enforcing the limits, on a manual clock."""
    with LiteServer(throttle=True, clock=clock) as srv:
        yield srv


def _append(c: httpx.Client, basin: str, body: str) -> httpx.Response:
    return c.post("/v1/streams/u/records", headers={"s2-basin": basin}, json={"records": [{"body": body}]})


def test_unary_appends_over_200_batches_per_second_get_429(throttled: LiteServer, clock: ManualClock) -> None:
    """On one connection the 201st batch within a second is refused with 429 rate_limited and a
    retry-after-ms hint, and not applied; another connection has its own budget; a second later it passes."""
    basin = fresh_basin(throttled.endpoint)
    with httpx.Client(base_url=throttled.endpoint, http2=False, timeout=10) as c:
        statuses = [_append(c, basin, str(i)).status_code for i in range(BATCHES_PER_SECOND)]
        assert statuses == [200] * BATCHES_PER_SECOND
        refused = _append(c, basin, "refused")
        assert (refused.status_code, refused.json()["code"]) == (429, "rate_limited")
        assert 0 < int(refused.headers["retry-after-ms"]) <= 1001
        with httpx.Client(base_url=throttled.endpoint, http2=False, timeout=10) as other:
            assert _append(other, basin, "other connection").status_code == 200
        clock.advance(1.0)
        assert _append(c, basin, "later").status_code == 200
        got = c.get("/v1/streams/u/records", params={"seq_num": 199}, headers={"s2-basin": basin}).json()
    assert [r["body"] for r in got["records"]] == ["199", "other connection", "later"]


def test_append_session_over_the_limit_ends_with_429(throttled: LiteServer, clock: ManualClock) -> None:
    """A session pipelining 250 batches in one second gets 200 acks, then a 429 terminal; nothing after is
    applied."""
    basin = fresh_basin(throttled.endpoint)
    clock.advance(1.0)

    async def main() -> None:
        async with client(throttled) as s2:
            st = s2.basin(basin).stream("s")

            async def pipeline() -> None:
                async with st.append_session() as sess:
                    tickets = [await sess.submit(AppendInput(records=[Record(b"x")])) for _ in range(250)]
                    for t in tickets:
                        await t

            with pytest.raises(S2ServerError) as err:
                await pipeline()
            assert (err.value.status_code, err.value.code) == (429, "rate_limited")
            assert (await st.check_tail()).seq_num == BATCHES_PER_SECOND

    run(main())


def test_limits_are_off_by_default(lite: LiteServer, basin: str) -> None:
    """Without throttle=True, 250 batches pipelined in well under a second are all acked."""

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("free")
            async with st.append_session() as sess:
                tickets = [await sess.submit(AppendInput(records=[Record(b"x")])) for _ in range(250)]
                acks = [await t for t in tickets]
            assert acks[-1].end.seq_num == 250
            assert len((await st.read(start=SeqNum(0))).records) == 250

    run(main())


class _Connection:
    """Stands for a client connection: the throttle only needs its identity."""


def test_bytes_per_second_limit_is_per_stream_across_connections() -> None:
    """100 MiB within a second on one stream, from any mix of connections, is the most admitted."""
    clock = ManualClock()
    throttle = Throttle(clock)
    stream = Stream("basin-name", "s", {}, 0.0)
    conns = [_Connection() for _ in range(4)]
    mib = 1024 * 1024
    for i in range(100):
        throttle.admit(conns[i % 4], stream, mib)
    with pytest.raises(ApiError) as err:
        throttle.admit(conns[0], stream, 1)
    assert (err.value.status, err.value.code) == (429, "rate_limited")
    throttle.admit(conns[0], Stream("basin-name", "other", {}, 0.0), mib)
    clock.advance(1.0)
    throttle.admit(conns[0], stream, mib)
    assert throttle.refused == 1
