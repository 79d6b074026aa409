"""Sign-in registers (the roll call): every task attempt of an exactly-once micro-batch signs in before its
first append, a compare-and-swap on its partition's register that orders its attempts (attempt numbers
restart with a stage retry). docs/exactly-once.md, *Per micro-batch*."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Final

from s2_sdk import (
    AppendInput,
    CommandRecord,
    ReadLimit,
    ReadUnwrittenError,
    Record,
    S2Basin,
    S2ClientError,
    S2ServerError,
    S2Stream,
    SeqNumMismatchError,
    StreamConfig,
    TailOffset,
)

from s2_sink._exactly_once.fencing import TaskAttempt
from s2_sink._transport.explain import is_stream_deleting
from s2_sink._transport.retry import DEFAULT_PATIENCE, Patience, Retrying, patiently
from s2_sink._transport.runtime import create_if_missing
from s2_sink.errors import FencedError

__all__ = [
    "REGISTER_PREFIX",
    "SignIn",
    "judge",
    "last_sign_in",
    "register_name",
    "sign_in",
    "still_last",
]

log = logging.getLogger(__name__)

REGISTER_PREFIX: Final = "_s2sink/register/"
_TRIM_EVERY: Final = 256  # a sign-in at a multiple of this position trims the register behind it
# Trimmed, never expired: a register that forgot its last sign-in would let a zombie sign in as first.
_CONFIG: Final = StreamConfig(retention_policy="infinite")


def register_name(writer_id: str, partition: int) -> str:
    """A writer's register per partition (the partition last, as a writer_id may hold ``/``)."""
    return f"{REGISTER_PREFIX}{writer_id}/{partition}"


@dataclass(frozen=True, slots=True)
class SignIn:
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


def judge(me: SignIn, last: SignIn | None, *, since: str | None = None) -> bool:
    """Whether `me` is a retry (an earlier attempt signed in for its epoch and batch) given the register's
    `last` sign-in; FencedError if `me` must stop (`since`: the register `me` signed in to before `last`)."""
    if last is None or last.writer != me.writer or last.attempt.partition != me.attempt.partition:
        return False  # nothing of this partition under this writer hash: the first attempt
    a = me.attempt
    who = f"task attempt (partition {a.partition}, task id {a.task_id}) of micro-batch {me.batch}"
    again = "" if since is None else " again"
    if (last.epoch, last.batch) > (me.epoch, me.batch):
        signed = "already signed in" if since is None else f"signed in since ({since!r})"
        raise FencedError(
            f"exactly-once: {who} (epoch {me.epoch}) found that an attempt of micro-batch {last.batch} "
            f"(epoch {last.epoch}) of its partition {signed}: the query has moved past this micro-batch, so "
            f"this is a late attempt of it and it stops without writing{again}"
        )
    if (last.epoch, last.batch) < (me.epoch, me.batch):
        return False
    if me.attempt.superseded_by(last.attempt):
        when = "before it started writing" if since is None else f"signed in to {since!r}"
        raise FencedError(
            f"exactly-once: {who} was superseded by a later attempt (task id {last.attempt.task_id}) {when}; "
            f"it stops without writing{again} (Spark keeps the later attempt's result)"
        )
    return last.attempt != a


async def last_sign_in(
    stream: S2Stream, *, patience: Patience = DEFAULT_PATIENCE
) -> tuple[SignIn | None, int] | None:
    """The register's last sign-in and its tail; None if there is no register."""

    async def read() -> tuple[SignIn | None, int] | None:
        try:
            batch = await stream.read(start=TailOffset(1), limit=ReadLimit(count=1))
        except ReadUnwrittenError as exc:  # an empty register
            return None, exc.tail.seq_num
        except S2ServerError as exc:
            if exc.status_code == 404 or is_stream_deleting(exc):
                return None  # missing, or deleted and still being removed (409): created anew once gone
            raise
        if not batch.records:  # trimmed by hand to nothing: no sign-in left to go by
            return None, (await stream.check_tail()).seq_num
        rec = batch.records[-1]
        return SignIn.parse(bytes(rec.body)), rec.seq_num + 1

    return await patiently(patience, f"reading the sign-in register {stream.name!r}", read)


async def still_last(
    basin: S2Basin, writer_id: str, me: SignIn, *, patience: Patience = DEFAULT_PATIENCE
) -> bool:
    """Whether `me` is still its partition's last sign-in (one record read): then no later attempt has
    fenced anything, as attempts sign in before fencing. FencedError if a later one signed in; False when
    the register cannot tell (the caller then scans the stream's fence records)."""
    name = register_name(writer_id, me.attempt.partition)
    found = await last_sign_in(basin.stream(name), patience=patience)
    if found is None or found[0] is None:
        return False
    last = found[0]
    if last == me:
        return True
    judge(me, last, since=name)
    return False


async def sign_in(
    basin: S2Basin, writer_id: str, me: SignIn, *, patience: Patience = DEFAULT_PATIENCE
) -> bool:
    """Sign `me` in; True if an earlier attempt of its partition signed in for the same batch, FencedError
    if a later attempt, batch or epoch did. Conditional, so retried (the next read tells what landed)."""
    name = register_name(writer_id, me.attempt.partition)
    stream = basin.stream(name)
    retrying = Retrying(patience, f"signing in to {name!r}")
    created = False
    decided: bool | None = None  # the decision behind our last append, if it may have landed
    while True:
        found = await last_sign_in(stream, patience=patience)
        if found is None:  # the partition's first sign-in (or the register was deleted)
            if created:
                raise FencedError(
                    f"exactly-once: the sign-in register {name!r} of partition {me.attempt.partition} "
                    "is missing again right after it was created; the task stops without writing"
                )
            await patiently(patience, f"creating {name!r}", lambda: create_if_missing(basin, name, _CONFIG))
            created = True
            continue
        last, tail = found
        if decided is not None and last == me:
            break  # our conditional append landed (its acknowledgement was lost): nothing came between
        decided = judge(me, last)
        records = [Record(body=me.encode())]
        if tail > 0 and tail % _TRIM_EVERY == 0:
            records.insert(0, CommandRecord.trim(tail))  # keeps the trim command and our sign-in
        try:
            await stream.append(AppendInput(records=records, match_seq_num=tail))
            break
        except SeqNumMismatchError:
            continue  # another attempt of this partition signed in between: decide again
        except (S2ClientError, S2ServerError) as exc:
            if isinstance(exc, S2ServerError) and (exc.status_code == 404 or is_stream_deleting(exc)):
                continue  # deleted since we read it: the next read creates it
            await retrying.after(exc)  # may have landed: the next read tells
    retrying.progress()
    assert decided is not None
    log.debug("signed in %s to %s at %s (earlier attempt: %s)", me, name, tail, decided)
    return decided
