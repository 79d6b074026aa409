"""Roll call: every task attempt of an exactly-once micro-batch signs in before its first append.

Spark restarts attempt numbers at 0 when it retries a whole stage (a ``FetchFailed`` after an executor
was lost, SPARK-24552), and pyspark's `TaskContext` has no stage attempt number, so a task cannot tell
from its context whether an earlier attempt of its partition already wrote part of it. The sign-in tells
it: each attempt appends ``{writer, epoch, batch, partition, task id}`` to the writer's roll stream
``_s2sink/attempts/<writer_id>``, then reads the sign-ins of its micro-batch that came before its own.

- An earlier attempt of its partition (lower task id) signed in: this attempt is a retry, whatever its
  attempt number, so it puts up a barrier and reads back before writing (`task.Dedupe`).
- A later attempt (higher task id; Spark hands out task ids in launch order) signed in first: this one
  is a zombie that started late; it stops before writing anything.
- An earlier attempt that signs in after a later one finds the later one and stops; one that signed in
  before it and still writes meets the later attempt's barrier (`fencing.refuse_if_superseded`).

The driver passes each micro-batch a position before all of its sign-ins (the stream's tail when the
batch began) and trims the stream behind it now and then, so reading the batch's sign-ins costs one
short read per task. A sign-in that finds that position trimmed belongs to a micro-batch the query has
moved on from; it stops rather than guess.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Final

from s2_sdk import (
    AppendInput,
    CommandRecord,
    Record,
    S2Basin,
    S2ClientError,
    S2ServerError,
    S2Stream,
    StreamConfig,
)

from s2_sink._exactly_once.bookkeeping_streams import ensure_once
from s2_sink._exactly_once.fencing import TaskAttempt
from s2_sink._exactly_once.readback import read_span
from s2_sink._transport.retry import Retries
from s2_sink.errors import FencedError

__all__ = ["ROLL_PREFIX", "RollCall", "open_roll", "roll_stream_name", "sign_in"]

log = logging.getLogger(__name__)

ROLL_PREFIX: Final = "_s2sink/attempts/"
# Sign-ins kept behind the current micro-batch before the driver trims them: one trim per this many.
_TRIM_EVERY: Final = 256
# Sign-ins matter only while their micro-batch runs; retention bounds the stream if nothing trims it.
_CONFIG: Final = StreamConfig(retention_policy=7 * 24 * 3600)

# Where this process last trimmed each roll stream, as (basin, stream).
_trimmed: dict[tuple[str, str], int] = {}


def roll_stream_name(writer_id: str) -> str:
    """The roll stream of a writer identity (beside its ledger, ``_s2sink/ledger/<writer_id>``)."""
    return ROLL_PREFIX + writer_id


@dataclass(frozen=True, slots=True)
class RollCall:
    """Where a micro-batch's task attempts sign in: the roll stream and a position before them all."""

    stream: str
    start: int


@dataclass(frozen=True, slots=True)
class SignIn:
    """One attempt's sign-in record."""

    writer: str
    epoch: int
    batch: int
    attempt: TaskAttempt

    def encode(self) -> bytes:
        a = self.attempt
        doc = {"w": self.writer, "e": self.epoch, "b": self.batch, "p": a.partition, "t": a.task_id}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def parse(cls, body: bytes) -> SignIn | None:
        try:
            d = json.loads(body)
            return cls(d["w"], int(d["e"]), int(d["b"]), TaskAttempt(int(d["p"]), int(d["t"])))
        except (ValueError, KeyError, TypeError):
            return None  # a command record or something that is not ours


async def open_roll(basin: S2Basin, writer_id: str) -> RollCall:
    """Driver, when a micro-batch begins: the roll call for its tasks (creating the stream if needed;
    trimming sign-ins of earlier micro-batches once enough of them piled up)."""
    name = roll_stream_name(writer_id)
    key = (basin.name, name)
    await ensure_once(basin, name, _CONFIG)
    stream = basin.stream(name)
    try:
        tail = (await stream.check_tail()).seq_num
    except S2ServerError as exc:
        if exc.status_code != 404:
            raise
        await _ensure(basin, name)  # deleted since this process created it
        tail = (await stream.check_tail()).seq_num
    if tail - _trimmed.get(key, 0) >= _TRIM_EVERY:
        # Every earlier micro-batch is committed (or belongs to a run that is gone): its attempts can
        # only be zombies, which find their batch's start trimmed and stop.
        await stream.append(AppendInput(records=[CommandRecord.trim(tail)]))
        _trimmed[key] = tail
        log.debug("roll stream %s trimmed to %s", name, tail)
    return RollCall(name, tail)


async def _ensure(basin: S2Basin, name: str) -> None:
    await basin.ensure_stream(name, config=_CONFIG)


async def sign_in(basin: S2Basin, roll: RollCall, me: SignIn) -> bool:
    """Sign `me` in; True if an earlier attempt of its partition signed in for the same micro-batch.

    Raises FencedError if a later attempt of its partition signed in first, or if the micro-batch's
    sign-ins were trimmed away (the query has moved past it).
    """
    stream = basin.stream(roll.stream)
    mine = await _append(basin, stream, me.encode())
    earlier = False
    expected = roll.start  # sign-ins are contiguous from the batch's start through ours, unless trimmed
    async for rec in read_span(stream, roll.start, mine + 1):
        if rec.seq_num != expected:
            break
        expected += 1
        other = SignIn.parse(bytes(rec.body))
        if other is None or (other.writer, other.epoch, other.batch) != (me.writer, me.epoch, me.batch):
            continue
        if other.attempt.partition != me.attempt.partition or other.attempt == me.attempt:
            continue
        if me.attempt.superseded_by(other.attempt):
            raise FencedError(
                f"exactly-once: task attempt (partition {me.attempt.partition}, task id "
                f"{me.attempt.task_id}) of micro-batch {me.batch} was superseded by a later attempt (task "
                f"id {other.attempt.task_id}) before it started writing; it stops without writing"
            )
        earlier = True
    if expected != mine + 1:
        raise FencedError(
            f"exactly-once: task attempt (partition {me.attempt.partition}, task id "
            f"{me.attempt.task_id}) of micro-batch {me.batch} cannot read the batch's attempts from "
            f"{roll.stream!r} (trimmed from {roll.start}): the query has moved past this micro-batch, so "
            "this is a late attempt of it and it stops without writing"
        )
    log.debug("signed in %s at %s of %s (earlier attempt: %s)", me, mine, roll.stream, earlier)
    return earlier


async def _append(basin: S2Basin, stream: S2Stream, body: bytes) -> int:
    """Append one sign-in; its seq_num. A sign-in applied twice is harmless (the same attempt twice)."""
    retries = Retries()
    created = False
    while True:
        try:
            ack = await stream.append(AppendInput(records=[Record(body=body)]))
            seq: int = ack.start.seq_num
            return seq
        except (S2ClientError, S2ServerError) as exc:
            if isinstance(exc, S2ServerError) and exc.status_code == 404 and not created:
                await _ensure(basin, stream.name)  # the driver creates it; a plan built elsewhere may not
                created = True
                continue
            await retries.after(exc)
