"""Fencing tokens of exactly-once writers, and the conditional "fence if older" step.

A token is ``s2sink:<writer-hash8>:<epoch>.<gen>~[<partition>.<task-id>]`` in base 36 (within S2's 36
bytes); 0.1.0's decimal tokens (no ``~``) are still read. docs/exactly-once.md, *Fencing tokens*."""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from s2_sdk import (
    AppendInput,
    CommandRecord,
    FencingTokenMismatchError,
    S2ClientError,
    S2ServerError,
    S2Stream,
    SeqNumMismatchError,
)

from s2_sink._exactly_once.ledger_records import stream_reset
from s2_sink._exactly_once.readback import read_span
from s2_sink._transport.retry import DEFAULT_PATIENCE, Patience, Retrying, patiently
from s2_sink.errors import FencedError

__all__ = [
    "MAX_TOKEN_BYTES",
    "Attendance",
    "TaskAttempt",
    "Token",
    "check_not_superseded",
    "fence_if_older",
    "judge_current_token",
    "writer_hash",
]

log = logging.getLogger(__name__)

MAX_TOKEN_BYTES: Final = 36
_PREFIX: Final = "s2sink"
# writer, epoch, generation, and (bumps only) the attempt that made it: partition, task id.
_TOKEN_RE: Final = re.compile(
    r"^s2sink:([0-9a-f]{8}):([0-9a-z]+)\.([0-9a-z]+)(~(?:([0-9a-z]+)\.([0-9a-z]+))?)?$"
)
_B36: Final = "0123456789abcdefghijklmnopqrstuvwxyz"
_MAX_ROUNDS: Final = 20

# Whether the task attempt is still its partition's last sign-in (`sign_in_registers.still_last`).
Attendance = Callable[[], Awaitable[bool]]


def writer_hash(writer_id: str) -> str:
    return hashlib.sha256(writer_id.encode()).hexdigest()[:8]


def _b36(n: int) -> str:
    out = ""
    while True:
        n, digit = divmod(n, 36)
        out = _B36[digit] + out
        if n == 0:
            return out


@dataclass(frozen=True, slots=True)
class TaskAttempt:
    """One attempt of one Spark task: later attempts of a partition have higher task ids (SPARK-24552)."""

    partition: int
    task_id: int

    def superseded_by(self, other: TaskAttempt | None) -> bool:
        return other is not None and other.partition == self.partition and other.task_id > self.task_id


@dataclass(frozen=True, slots=True, order=True)
class Token:
    """A parsed fencing token of an exactly-once writer. Orders by (epoch, gen) within one writer."""

    epoch: int
    gen: int
    writer: str
    by: TaskAttempt | None = field(default=None, compare=False)  # whose retry barrier set this generation

    def __str__(self) -> str:
        # One encoding, base 36, so a long run's retry still fits 36 bytes; the ``~`` tells it from the
        # decimal tokens of earlier versions.
        run = f"{_b36(self.epoch)}.{_b36(self.gen)}"
        by = "" if self.by is None else f"{_b36(self.by.partition)}.{_b36(self.by.task_id)}"
        return f"{_PREFIX}:{self.writer}:{run}~{by}"

    def encode(self) -> str:
        text = str(self)
        if len(text.encode()) > MAX_TOKEN_BYTES:
            raise ValueError(f"fencing token {text!r} exceeds {MAX_TOKEN_BYTES} bytes")
        return text

    @classmethod
    def parse(cls, text: str) -> Token | None:
        m = _TOKEN_RE.match(text)
        if m is None:
            return None
        if m.group(4) is None:  # an earlier version's decimal token
            if not (m.group(2).isdigit() and m.group(3).isdigit()):
                return None
            return cls(epoch=int(m.group(2)), gen=int(m.group(3)), writer=m.group(1))
        by = None if m.group(5) is None else TaskAttempt(int(m.group(5), 36), int(m.group(6), 36))
        return cls(epoch=int(m.group(2), 36), gen=int(m.group(3), 36), writer=m.group(1), by=by)


def judge_current_token(
    stream: str, current: str, mine: Token, *, may_take_over: bool = False
) -> Token | None:
    """The token a 412 reported on `stream` to adopt (ours, this run, a newer generation); None when this
    run may fence over it (empty, an older run's, or another writer's with `may_take_over`: we never
    committed to the stream); FencedError when it must not."""
    if current == "":
        return None
    theirs = Token.parse(current)
    if theirs is not None and theirs.writer != mine.writer and may_take_over:
        # A new writer (e.g. the same pipeline after its checkpoint was deleted) takes the stream over; a
        # still-running previous owner gets a FencedError on its next append and refuses to take it back.
        log.warning(
            "stream %s: taking over from exactly-once writer %s (token %r)", stream, theirs.writer, current
        )
        return None
    if theirs is None or theirs.writer != mine.writer:
        raise FencedError(
            f"stream {stream!r} is fenced with token {current!r}, which is not this writer's "
            f"({mine.writer}); another exactly-once writer (or a tool) took it over after this writer "
            "last wrote to it. Two exactly-once writers cannot share a stream: use "
            "delivery='at-least-once' for one of them or write to another stream; if the other writer is "
            "gone for good, clear the fence (append a fence command record with an empty token, e.g. "
            "`s2 fence` with an empty token) and restart"
        )
    if theirs.epoch > mine.epoch:
        raise FencedError(
            f"stream {stream!r} is fenced by a newer run of this writer (token {current!r} > {mine}); "
            "this run was superseded (its driver restarted or a second driver uses the same writer_id)"
        )
    if theirs.epoch == mine.epoch:
        return theirs if theirs >= mine else None
    return None


async def fence_if_older(
    stream: S2Stream,
    mine: Token,
    *,
    current: str | None = None,
    bump: bool = False,
    may_take_over: bool = False,
    me: TaskAttempt | None = None,
    end: int | None = None,
    writer_id: str | None = None,
    attendance: Attendance | None = None,
    patience: Patience = DEFAULT_PATIENCE,
) -> Token:
    """Make `stream` carry a token of this run: ``mine`` (the driver, or over an older run or an empty
    stream) or a new generation named by task attempt `me`, after the zombie check from `end`, the ledger's
    committed end (a tail below it is a reset). `current`: the token a 412 reported. Every step is a read or
    a conditional fence, so all are retried until `patience`'s deadline."""
    name, since = stream.name, end or 0
    seen: str = str(mine) if current is None else current
    retrying = Retrying(patience, f"fencing stream {name!r}")
    checked: str | None = None
    top = mine.gen  # the highest generation of this epoch seen on the stream
    rounds = 0  # token changes seen; retries of failures are bounded by the deadline instead
    held = False  # the stream was seen holding a record: not new
    while rounds < _MAX_ROUNDS:
        adopt = judge_current_token(name, seen, mine, may_take_over=may_take_over)
        theirs = Token.parse(seen)
        this_run = theirs is not None and (theirs.writer, theirs.epoch) == (mine.writer, mine.epoch)
        if theirs is not None and this_run:
            top = max(top, theirs.gen)
        older_run = theirs is not None and theirs.writer == mine.writer and theirs.epoch < mine.epoch
        # A task's take-over of an empty token: is the stream new (no record, so no fence to check for)?
        # Assumed so until a fence conditional on it being empty says otherwise, unless the ledger has an
        # end for it (its tail is read then: below that end, it was reset).
        fresh = await _tail_checks(
            stream,
            end if theirs is None or theirs.writer != mine.writer else None,
            writer_id or "WRITER_ID",
            new_stream=seen == "" and not bump and me is not None and not held,
            patience=patience,
        )
        if me is not None and seen != checked and seen != str(mine) and not fresh:
            if theirs is not None and this_run and me.superseded_by(theirs.by):
                _raise_superseded(name, me, theirs)
            if adopt is None or adopt.by != me:
                # Adopting, bumping or fencing over an older run: the sign-in register answers. A take-over
                # of an empty or foreign token scans the stream, so its new generation is above every
                # generation of the run fenced there (rare: a cleared fence, a new writer).
                ask = attendance if adopt is not None or bump or older_run else None
                top = max(top, await check_not_superseded(stream, me, mine, since, ask, patience=patience))
            checked = seen
        if adopt is not None and not bump and seen != str(mine):
            return adopt
        # Otherwise fence; when seen == mine (no bump), that is a redundant fence proving the token is ours.
        if not bump and (me is None or seen == str(mine) or older_run or fresh):
            target = mine
        else:
            target = Token(epoch=mine.epoch, gen=top + 1, writer=mine.writer, by=me)
        try:
            # A new stream's generation 0 also needs it still empty: a barrier and a clear since the tail
            # was read leave the token empty but not the stream.
            ack = await stream.append(
                AppendInput(
                    records=[CommandRecord.fence(target.encode())],
                    fencing_token=seen,
                    match_seq_num=0 if fresh else None,
                )
            )
        except FencingTokenMismatchError as exc:
            seen, rounds = exc.expected_fencing_token, rounds + 1
            retrying.progress()
            continue
        except SeqNumMismatchError:
            held, rounds = True, rounds + 1
            retrying.progress()
            continue  # not new: look again
        except (S2ClientError, S2ServerError) as exc:
            # Transport errors and 5xx: the fence is conditional, so trying again cannot apply it twice (if
            # it landed, the next try gets a 412 that shows our token).
            await retrying.after(exc)
            continue
        retrying.progress()
        if me is not None and not fresh and (theirs is None or theirs.writer != mine.writer):
            # An empty or foreign token can come back after a later attempt's barrier (an operator cleared
            # it), so a fence conditional on it cannot tell that the check before it went stale: the zombie
            # check runs again over everything up to our fence. Not after a fence that found the stream
            # empty: a barrier or a clear is a record, so none was there before it.
            await check_not_superseded(stream, me, mine, since, patience=patience)
        log.debug("fenced stream=%s token=%s (was %r) at=%s", name, target, seen, ack.end.seq_num)
        return target
    raise FencedError(f"could not fence stream {name!r}: its token kept changing (last seen {seen!r})")


async def _tail_checks(
    stream: S2Stream, end: int | None, writer_id: str, *, new_stream: bool, patience: Patience
) -> bool:
    """Before fencing over a token not ours: a tail below `end` is a stream reset. Whether to fence
    `new_stream` as holding no record (without an `end` the fence's ``match_seq_num=0`` asks)."""
    if end is None:
        return new_stream
    tail = await _tail(stream, patience)
    if tail < end:
        raise stream_reset(stream.name, end, tail, writer_id)
    return new_stream and tail == 0


async def _tail(stream: S2Stream, patience: Patience) -> int:
    position = await patiently(patience, f"checking the tail of {stream.name!r}", stream.check_tail)
    return int(position.seq_num)


async def check_not_superseded(
    stream: S2Stream,
    me: TaskAttempt,
    mine: Token,
    since: int,
    attendance: Attendance | None = None,
    *,
    patience: Patience = DEFAULT_PATIENCE,
) -> int:
    """The zombie check: FencedError if a later attempt of `me`'s partition fenced `stream` in `mine`'s run
    since `since`, else the run's highest generation there (-1: none, or not read). `attendance` answers in
    one record where it can; else every fence record of ``[since, tail)`` is read."""
    if attendance is not None and await attendance():
        return -1
    top = -1
    end = await _tail(stream, patience)
    async for rec in read_span(stream, since, end, patience=patience):
        if rec.headers == [(b"", CommandRecord.FENCE)]:
            token = Token.parse(bytes(rec.body).decode("utf-8", "replace"))
            if token is None or (token.writer, token.epoch) != (mine.writer, mine.epoch):
                continue
            if me.superseded_by(token.by):
                _raise_superseded(stream.name, me, token)
            top = max(top, token.gen)
    return top


def _raise_superseded(stream: str, me: TaskAttempt, token: Token) -> None:
    raise FencedError(
        f"stream {stream!r}: this task attempt (partition {me.partition}, task id {me.task_id}) was "
        f"superseded by a later attempt of the same partition (fence {token}); it stops without writing "
        "again (Spark keeps the later attempt's result)"
    )
