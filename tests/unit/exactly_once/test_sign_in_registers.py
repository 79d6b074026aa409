"""The per-partition registers task attempts sign in to (`sign_in_registers`), against the lite server: what a
sign-in finds, how two attempts racing for one register are ordered, and the register's trims."""

from __future__ import annotations

import asyncio

import pytest
from s2_sdk import AppendInput, Record

from s2_sink._exactly_once.fencing import TaskAttempt
from s2_sink._exactly_once.sign_in_registers import SignIn, register_name, sign_in, still_last
from s2_sink.errors import FencedError
from s2_sink.lite import LiteServer
from tests.faults._support import client, list_streams, make_basin, read_all, run

ROLL = "w/x"


def _go(lite: LiteServer, basin: str, me: SignIn) -> bool:
    async def go() -> bool:
        async with client(lite.endpoint) as s2:
            return await sign_in(s2.basin(basin), ROLL, me)

    return run(go())


def test_sign_in_finds_earlier_and_later_attempts_of_its_own_partition_only(lite: LiteServer) -> None:
    """Sign-ins of other partitions, earlier batches and earlier epochs do not count; an earlier attempt
    of the same partition and batch makes a retry; an attempt launched before the last one to sign in
    stops."""
    name = make_basin(lite.endpoint)
    assert _go(lite, name, SignIn("abcdef01", 1, 5, TaskAttempt(0, 10))) is False
    assert _go(lite, name, SignIn("abcdef01", 1, 5, TaskAttempt(1, 11))) is False  # another partition
    assert _go(lite, name, SignIn("abcdef01", 1, 5, TaskAttempt(0, 20))) is True  # a retry of task 10
    with pytest.raises(FencedError, match="superseded"):
        _go(lite, name, SignIn("abcdef01", 1, 5, TaskAttempt(0, 15)))  # launched before task 20, starts after
    assert _go(lite, name, SignIn("abcdef01", 1, 6, TaskAttempt(0, 21))) is False  # the next batch
    assert _go(lite, name, SignIn("abcdef01", 2, 6, TaskAttempt(0, 22))) is False  # a new epoch replays it
    assert _go(lite, name, SignIn("0123abcd", 1, 9, TaskAttempt(0, 23))) is False  # another writer hash
    streams = run(list_streams(lite.endpoint, name))
    assert sorted(streams) == ["_s2sink/register/w/x/0", "_s2sink/register/w/x/1"]


@pytest.mark.parametrize(
    ("batch", "epoch"),
    [(4, 2), (6, 1)],  # an earlier batch of the same epoch; the same batch in an earlier epoch
)
def test_attempt_of_a_batch_or_epoch_the_partition_moved_past_stops(
    lite: LiteServer, batch: int, epoch: int
) -> None:
    """Once an attempt of a later micro-batch (or a later epoch) signed in for the partition, a late attempt
    of an earlier one stops before writing, whatever its task id."""
    name = make_basin(lite.endpoint)
    assert _go(lite, name, SignIn("abcdef01", 2, 6, TaskAttempt(0, 10))) is False
    with pytest.raises(FencedError, match="moved past this micro-batch"):
        _go(lite, name, SignIn("abcdef01", epoch, batch, TaskAttempt(0, 99)))


def test_racing_attempts_of_one_partition_are_ordered_by_the_register(lite: LiteServer) -> None:
    """Two attempts of one partition signing in at the same moment: the conditional append lets one in
    first, the other reads again and decides on it. Either the earlier task id signs in first (the later
    one is then a retry) or the later does (the earlier one then stops): never both first attempts."""
    name = make_basin(lite.endpoint)

    async def go() -> list[list[bool | BaseException]]:
        async with client(lite.endpoint) as s2:
            basin = s2.basin(name)
            out = []
            for p in range(20):
                await basin.create_stream(
                    register_name(ROLL, p)
                )  # both race for the append, not the creation
                early = sign_in(basin, ROLL, SignIn("abcdef01", 1, 0, TaskAttempt(p, 10)))
                late = sign_in(basin, ROLL, SignIn("abcdef01", 1, 0, TaskAttempt(p, 20)))
                out.append(list(await asyncio.gather(early, late, return_exceptions=True)))
            return out

    for early, late in run(go()):
        assert (early, late) == (False, True) or (isinstance(early, FencedError) and late is False)


def test_register_trims_itself_and_keeps_its_last_sign_in(lite: LiteServer) -> None:
    """Every 256 records a sign-in trims the register behind it, so a register holds a bounded number of
    records however many micro-batches ran, and its last record is always the last sign-in."""
    name = make_basin(lite.endpoint)
    register = register_name(ROLL, 0)

    async def go() -> None:
        async with client(lite.endpoint) as s2:
            basin = s2.basin(name)
            await basin.create_stream(register)
            filler = [Record(body=SignIn("abcdef01", 1, b, TaskAttempt(0, b)).encode()) for b in range(256)]
            await basin.stream(register).append(AppendInput(records=filler))
            assert await sign_in(basin, ROLL, SignIn("abcdef01", 1, 256, TaskAttempt(0, 256))) is False
            assert await sign_in(basin, ROLL, SignIn("abcdef01", 1, 256, TaskAttempt(0, 257))) is True

    run(go())
    kept = run(read_all(lite.endpoint, name, register))
    assert [SignIn.parse(bytes(r.body)) for r in kept] == [
        SignIn("abcdef01", 1, 256, TaskAttempt(0, 256)),
        SignIn("abcdef01", 1, 256, TaskAttempt(0, 257)),
    ]


def _still(lite: LiteServer, basin: str, me: SignIn) -> bool:
    async def go() -> bool:
        async with client(lite.endpoint) as s2:
            return await still_last(s2.basin(basin), ROLL, me)

    return run(go())


def test_an_attempt_is_still_last_until_a_later_attempt_batch_or_epoch_signs_in(lite: LiteServer) -> None:
    """The zombie check's one-record question: an attempt whose sign-in is its register's last record is
    still last (no later attempt of its partition can have fenced anything), another partition's sign-ins
    do not change that, and once a later attempt, micro-batch or epoch of the partition signs in the
    attempt stops. A register that cannot tell (missing, or last signed in by another writer hash) answers
    False: the caller scans the stream instead."""
    name = make_basin(lite.endpoint)
    me = SignIn("abcdef01", 1, 5, TaskAttempt(0, 10))
    assert _still(lite, name, me) is False  # no register yet
    _go(lite, name, me)
    _go(lite, name, SignIn("abcdef01", 1, 5, TaskAttempt(1, 30)))  # another partition's register
    assert _still(lite, name, me) is True
    _go(lite, name, SignIn("abcdef01", 1, 5, TaskAttempt(0, 20)))  # the partition's retry
    with pytest.raises(FencedError, match="superseded"):
        _still(lite, name, me)
    retry = SignIn("abcdef01", 1, 5, TaskAttempt(0, 20))
    assert _still(lite, name, retry) is True
    _go(lite, name, SignIn("abcdef01", 1, 6, TaskAttempt(0, 21)))  # the next micro-batch
    with pytest.raises(FencedError, match="moved past this micro-batch"):
        _still(lite, name, retry)
    _go(lite, name, SignIn("0123abcd", 1, 9, TaskAttempt(0, 40)))  # another writer hash
    assert _still(lite, name, SignIn("abcdef01", 1, 6, TaskAttempt(0, 21))) is False
