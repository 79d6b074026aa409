"""Fault hooks: real 503s, dropped TCP connections (before apply and after durable-before-ack), delayed acks,
driven in-process and over HTTP. The hooks are the lite server's own (s2-lite has none: docs/lite.md)."""

from __future__ import annotations

import time
from datetime import timedelta

import httpx
import pytest
from s2_sdk import (
    AppendInput,
    AppendRetryPolicy,
    ReadLimit,
    Record,
    Retry,
    S2Error,
    S2ServerError,
    SeqNum,
)

from s2_sink.lite import Faults, FaultsDisabledError, LiteServer, RemoteFaults
from s2_sink.testing import fresh_basin
from tests.lite._sdk import client, run

pytestmark = pytest.mark.faults

RETRY = Retry(
    max_attempts=5, min_base_delay=timedelta(milliseconds=10), max_base_delay=timedelta(milliseconds=50)
)


async def _bodies(lite: LiteServer, basin: str, stream: str) -> list[bytes]:
    async with client(lite) as s2:
        st = s2.basin(basin).stream(stream)
        tail = (await st.check_tail()).seq_num
        out: list[bytes] = []
        if tail:
            async for rb in st.read_session(start=SeqNum(0), limit=ReadLimit(count=tail)):
                out += [r.body for r in rb.records]
        return out


def test_fail_next_appends_gives_503_and_changes_nothing(
    lite: LiteServer, basin: str, lite_faults: Faults
) -> None:
    """Armed failures answer 503 unavailable without applying; the SDK's retries then succeed exactly once."""
    before = lite_faults.counters()
    lite_faults.fail_next_appends(1)

    async def main() -> None:
        async with client(lite) as s2:
            with pytest.raises(S2ServerError) as err:
                await s2.basin(basin).stream("f").append(AppendInput(records=[Record(b"a")]))
            assert (err.value.status_code, err.value.code) == (503, "unavailable")
        lite_faults.fail_next_appends(2)
        async with client(lite, retry=RETRY) as s2:
            ack = await s2.basin(basin).stream("f").append(AppendInput(records=[Record(b"b")]))
            assert ack.start.seq_num == 0

    run(main())
    assert run(_bodies(lite, basin, "f")) == [b"b"]
    assert lite_faults.counters().failed_appends - before.failed_appends == 3


def test_session_recovers_from_injected_failures_and_drops(
    lite: LiteServer, basin: str, lite_faults: Faults
) -> None:
    """A pipelined session hit by a 503 terminal frame and then a dropped connection (before apply) is
    re-established by the SDK and every batch lands exactly once, in order."""
    before = lite_faults.counters()

    async def main() -> None:
        async with client(lite, retry=RETRY) as s2:
            st = s2.basin(basin).stream("s")
            async with st.append_session() as sess:
                tickets = []
                for b in range(30):
                    if b == 5:
                        lite_faults.fail_next_appends(1)
                    if b == 15:
                        lite_faults.drop_connections(after_appends=2)
                    tickets.append(await sess.submit(AppendInput(records=[Record(b"%d" % b)])))
                for t in tickets:
                    await t

    run(main())
    assert run(_bodies(lite, basin, "s")) == [b"%d" % b for b in range(30)]
    counters = lite_faults.counters()
    assert counters.failed_appends - before.failed_appends >= 1
    assert counters.dropped_connections - before.dropped_connections == 1


def test_ambiguous_drop_applies_the_append_but_loses_its_ack(
    lite: LiteServer, basin: str, lite_faults: Faults
) -> None:
    """drop_connections(ambiguous=True) makes the append durable, then cuts the connection before the ack:
    a blind retry duplicates it, and a retry guarded by match_seq_num fails instead of duplicating."""
    before = lite_faults.counters()
    lite_faults.drop_connections(after_appends=0, ambiguous=True)

    async def main() -> None:
        async with client(lite, retry=RETRY) as s2:
            st = s2.basin(basin).stream("amb")
            await st.append(AppendInput(records=[Record(b"x")]))
            lite_faults.drop_connections(after_appends=0, ambiguous=True)
            with pytest.raises(S2Error):
                await st.append(AppendInput(records=[Record(b"y")], match_seq_num=2))

    run(main())
    assert run(_bodies(lite, basin, "amb")) == [b"x", b"x", b"y"]
    assert lite_faults.counters().ambiguous_drops - before.ambiguous_drops == 2


def test_no_side_effects_policy_does_not_retry_ambiguous_session_failures(
    lite: LiteServer, basin: str, lite_faults: Faults
) -> None:
    """With AppendRetryPolicy.NO_SIDE_EFFECTS a connection dropped after the append was applied surfaces as
    an error instead of a silent duplicate."""
    retry = Retry(max_attempts=3, append_retry_policy=AppendRetryPolicy.NO_SIDE_EFFECTS)
    lite_faults.drop_connections(after_appends=1, ambiguous=True)

    async def main() -> None:
        async with client(lite, retry=retry) as s2:
            st = s2.basin(basin).stream("nse")

            async def two_batches() -> None:
                async with st.append_session() as sess:
                    await (await sess.submit(AppendInput(records=[Record(b"1")])))
                    await (await sess.submit(AppendInput(records=[Record(b"2")])))

            with pytest.raises(S2Error):
                await two_batches()

    run(main())
    assert run(_bodies(lite, basin, "nse")) == [b"1", b"2"]


def test_delay_acks_holds_acks_back(lite: LiteServer, basin: str, lite_faults: Faults) -> None:
    """delay_acks(ms) delays unary append responses and session acks by at least that long."""
    before = lite_faults.counters()
    lite_faults.delay_acks(300)

    async def main() -> None:
        async with client(lite) as s2:
            st = s2.basin(basin).stream("d")
            t0 = time.monotonic()
            await st.append(AppendInput(records=[Record(b"a")]))
            async with st.append_session() as sess:
                await (await sess.submit(AppendInput(records=[Record(b"b")])))
            assert time.monotonic() - t0 >= 0.6

    run(main())
    assert lite_faults.counters().delayed_acks - before.delayed_acks >= 2


def test_faults_over_http_drive_a_subprocess_server(tmp_path: object) -> None:
    """A subprocess server started with faults allowed is driven through POST /_lite/faults (RemoteFaults)."""
    with LiteServer(subprocess=True, faults=True) as srv:
        assert isinstance(srv.faults, RemoteFaults)
        name = fresh_basin(srv.endpoint)
        srv.faults.fail_next_appends(1, status=500)

        async def main() -> None:
            async with client(srv) as s2:
                with pytest.raises(S2ServerError) as err:
                    await s2.basin(name).stream("h").append(AppendInput(records=[Record(b"a")]))
                assert err.value.status_code == 500
                await s2.basin(name).stream("h").append(AppendInput(records=[Record(b"b")]))

        run(main())
        assert srv.faults.counters().failed_appends == 1
        srv.faults.clear()
        with httpx.Client(http1=False, http2=True, base_url=srv.endpoint) as c:
            doc = c.post("/_lite/faults", json={"delay_acks_ms": 5}).json()
            assert doc["delay_acks_ms"] == 5
            assert doc["counters"]["failed_appends"] == 1


def test_faults_are_refused_unless_allowed() -> None:
    """Without faults=True the hooks raise FaultsDisabledError and the HTTP endpoint answers 403."""
    with LiteServer() as srv:
        assert isinstance(srv.faults, Faults)
        with pytest.raises(FaultsDisabledError):
            srv.faults.fail_next_appends(1)
        with httpx.Client(http1=False, http2=True, base_url=srv.endpoint) as c:
            resp = c.post("/_lite/faults", json={"fail_next_appends": 1})
            assert (resp.status_code, resp.json()["code"]) == (403, "permission_denied")
