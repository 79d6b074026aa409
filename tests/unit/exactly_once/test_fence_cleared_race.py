"""A zombie's take-over of an empty token races a retry's barrier and an operator's fence clear: the zombie
checks the stream's fences, then its retry fences, then ``s2-sink fences clear`` puts the empty token back,
and the zombie's fence, conditional on that empty token, lands. The zombie must still stop: the check runs
again over everything up to its own fence. Block level against the lite server (no Spark); the interleaving
is forced by a wrapper around the SDK stream that lets the retry and the operator act just before the
zombie's fence is sent."""

from __future__ import annotations

from typing import Any

import pytest
from s2_sdk import AppendAck, AppendInput, CommandRecord, Record, S2Stream

from s2_sink._exactly_once.fencing import TaskAttempt, Token, fence_if_older, writer_hash
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink.errors import FencedError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin, read_all, run

MINE = Token(epoch=1, gen=0, writer=writer_hash("w"))
ZOMBIE = TaskAttempt(partition=0, task_id=1)
RETRY = TaskAttempt(partition=0, task_id=2)


class _RacedStream:
    """The SDK stream, except that just before the zombie's fence after its check is sent (not its first
    try, which asks whether the stream is still new), its retry puts up its barrier and an operator clears
    it (a fence command with an empty token, appended without one)."""

    def __init__(self, stream: S2Stream) -> None:
        self._stream = stream
        self.raced = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def append(self, inp: AppendInput) -> AppendAck:
        fence = inp.records and inp.records[0].headers == [(b"", CommandRecord.FENCE)]
        if not self.raced and fence and inp.match_seq_num is None:
            self.raced = True
            await fence_if_older(self._stream, MINE, bump=True, me=RETRY)
            await self._stream.append(AppendInput(records=[CommandRecord.fence("")]))
        return await self._stream.append(inp)


def test_a_zombie_fencing_over_a_cleared_token_after_its_retrys_barrier_stops(lite: LiteServer) -> None:
    """The zombie (task 1) meets an empty token, finds no later attempt's fence, and fences; between its
    check and its fence, its retry (task 2) fenced and an operator cleared the fence, so the zombie's fence
    lands. It raises FencedError naming the retry's barrier instead of returning a token to append with
    (before: it got the stream with a generation of its own and went on appending after the retry had read
    the stream back: duplicates, 1 of 40 ``cleared-fence`` schedules)."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin)
    stream = _RacedStream(get_pool().client(cfg).basin(basin).stream("events"))
    # A stream that holds a record: over the empty token of a stream that never held one, a task fences
    # to generation 0 conditional on it staying empty, which the barrier alone already defeats.
    _runtime.run(stream.append(AppendInput(records=[Record(body=b"an earlier run's record")])))

    async def zombie() -> object:
        return await fence_if_older(stream, MINE, current="", me=ZOMBIE)  # type: ignore[arg-type]

    with pytest.raises(FencedError, match=r"task id 1\) was superseded by a later attempt .*1\.1~0\.2"):
        _runtime.run(zombie())
    assert stream.raced
    records = run(read_all(lite.endpoint, basin, "events", commands=True))
    fences = [bytes(r.body).decode() for r in records if r.headers == [(b"", CommandRecord.FENCE)]]
    assert fences == [str(Token(1, 1, MINE.writer, RETRY)), "", str(Token(1, 1, MINE.writer, ZOMBIE))]
