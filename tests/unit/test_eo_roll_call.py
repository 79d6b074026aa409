"""The roll stream task attempts sign in to (`roll_call`), against the lite server: the driver's view of a
micro-batch's start, its trims, and what a sign-in finds."""

from __future__ import annotations

import pytest
from s2_sdk import AppendInput, Record

from s2_sink._exactly_once.fencing import TaskAttempt
from s2_sink._exactly_once.roll_call import RollCall, SignIn, open_roll, roll_stream_name, sign_in
from s2_sink.errors import FencedError
from s2_sink.lite import LiteServer
from tests.faults._support import client, make_basin, read_all, run


def test_driver_trims_sign_ins_of_earlier_batches_once_enough_piled_up(lite: LiteServer) -> None:
    """Below the threshold the driver only reads the tail; from 256 sign-ins behind the current batch on it
    trims them, so the roll stream stays small however long the query runs."""
    name = make_basin(lite.endpoint)

    async def go() -> tuple[int, int, int]:
        async with client(lite.endpoint) as s2:
            basin = s2.basin(name)
            first = await open_roll(basin, "w")
            stream = basin.stream(first.stream)
            for i in range(0, 300, 100):
                batch = [SignIn("abcdef01", 1, 0, TaskAttempt(j, j)) for j in range(i, i + 100)]
                await stream.append(AppendInput(records=[Record(body=s.encode()) for s in batch]))
            second = await open_roll(basin, "w")
            third = await open_roll(basin, "w")
            return first.start, second.start, third.start

    first, second, third = run(go())
    assert first == 0
    assert second == 300  # the tail before the trim command
    assert third == 301  # one command record later, no second trim
    kept = run(read_all(lite.endpoint, name, roll_stream_name("w")))
    assert kept == []  # every sign-in before batch start 300 is gone


def test_sign_in_finds_earlier_and_later_attempts_of_its_own_partition_only(lite: LiteServer) -> None:
    """Sign-ins of other partitions, other batches and other epochs do not count; an earlier attempt of
    the same partition makes a retry."""
    name = make_basin(lite.endpoint)
    roll = RollCall(roll_stream_name("w"), 0)

    async def go(me: SignIn) -> bool:
        async with client(lite.endpoint) as s2:
            return await sign_in(s2.basin(name), roll, me)

    assert run(go(SignIn("abcdef01", 1, 5, TaskAttempt(0, 10)))) is False
    assert run(go(SignIn("abcdef01", 1, 5, TaskAttempt(1, 11)))) is False  # another partition
    assert run(go(SignIn("abcdef01", 1, 6, TaskAttempt(0, 12)))) is False  # another batch
    assert run(go(SignIn("abcdef01", 2, 5, TaskAttempt(0, 13)))) is False  # another epoch
    assert run(go(SignIn("0123abcd", 1, 5, TaskAttempt(0, 14)))) is False  # another writer
    assert run(go(SignIn("abcdef01", 1, 5, TaskAttempt(0, 20)))) is True  # a retry of task 10
    with pytest.raises(FencedError, match="superseded"):
        run(go(SignIn("abcdef01", 1, 5, TaskAttempt(0, 15))))  # launched before task 20, starts after
