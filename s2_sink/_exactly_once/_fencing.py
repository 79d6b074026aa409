"""Fencing tokens of exactly-once writers, and the conditional "fence if older" step.

A token is ``s2sink:<writer-hash8>:<epoch>.<gen>`` (at most 36 bytes, S2's limit). ``epoch`` is the
writer's run number from the ledger: a restarted driver gets a higher one, so tasks of an older run
(zombies) get ``412 fencing_token_mismatch`` once the new run has fenced a stream. ``gen`` is bumped by a
task *retry* before it reads the stream back: the bump is a barrier after which nothing the failed
attempt still had in flight can land. Live sibling tasks of the same run adopt the newer generation
(a 412 means their append was not applied, so re-sending it is safe).

Fencing tokens are one per stream and cooperative: appends without a token are always accepted, so
at-least-once writers and other tools can share a stream. A token that is not ours, or ours from a newer
run, is never overwritten: that is a ``FencedError`` naming the stream and the token.

Every fence is itself conditional (``fencing_token=<the token we saw>``), so two runs racing to fence
the same stream cannot both win.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass
from typing import Final

from s2_sdk import (
    AppendInput,
    CommandRecord,
    FencingTokenMismatchError,
    S2ClientError,
    S2ServerError,
    S2Stream,
)

from s2_sink._retry import Backoff, retryable
from s2_sink.errors import FencedError

__all__ = [
    "MAX_TOKEN_BYTES",
    "FenceResult",
    "Token",
    "fence_if_older",
    "judge_current_token",
    "writer_hash",
]

log = logging.getLogger(__name__)

MAX_TOKEN_BYTES: Final = 36
_PREFIX: Final = "s2sink"
_TOKEN_RE: Final = re.compile(r"^s2sink:([0-9a-f]{8}):(\d+)\.(\d+)$")
_MAX_ROUNDS: Final = 20
# Waits after a failed fence that the SDK's own retries did not fix: 0.1 s doubling to 2 s, six of them.
_BACKOFF: Final = Backoff(first=0.1, cap=2.0, retries=6, jitter=False)


def writer_hash(writer_id: str) -> str:
    """8 hex chars identifying a writer identity in tokens and chunk tags."""
    return hashlib.sha256(writer_id.encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True, order=True)
class Token:
    """A parsed fencing token of an exactly-once writer. Orders by (epoch, gen) within one writer."""

    epoch: int
    gen: int
    writer: str

    def __str__(self) -> str:
        return f"{_PREFIX}:{self.writer}:{self.epoch}.{self.gen}"

    def encode(self) -> str:
        """The wire form; raises ValueError if it would exceed S2's 36-byte limit."""
        text = str(self)
        if len(text.encode()) > MAX_TOKEN_BYTES:
            raise ValueError(f"fencing token {text!r} exceeds {MAX_TOKEN_BYTES} bytes")
        return text

    @classmethod
    def parse(cls, text: str) -> Token | None:
        """A token of ours, or ``None`` for anything else (a foreign token or ``""``)."""
        m = _TOKEN_RE.match(text)
        if m is None:
            return None
        return cls(epoch=int(m.group(2)), gen=int(m.group(3)), writer=m.group(1))

    def next_gen(self) -> Token:
        return Token(epoch=self.epoch, gen=self.gen + 1, writer=self.writer)


def judge_current_token(
    stream: str, current: str, mine: Token, *, may_take_over: bool = False
) -> Token | None:
    """What to do about the token a 412 reported on `stream`.

    Returns the token to adopt as-is (ours, same run, a newer generation), or ``None`` when this run may
    fence over it (empty, ours from an older run, or — with `may_take_over`, i.e. this writer never
    committed a write to the stream — another s2_sink writer's). Raises FencedError when it must not.
    """
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


@dataclass(frozen=True, slots=True)
class FenceResult:
    """The token now on the stream and the seq_num right after our fence (None if adopted, not fenced)."""

    token: Token
    position: int | None


async def fence_if_older(
    stream: S2Stream,
    mine: Token,
    *,
    current: str | None = None,
    bump: bool = False,
    may_take_over: bool = False,
) -> FenceResult:
    """Make `stream` carry a token of this run (``mine`` or a newer generation of it).

    `current` is the token a 412 just reported, if known (saves a probe). With ``bump=True`` the
    generation is raised past whatever this run has on the stream: a barrier against the stream's earlier
    appends that used the older generation. Every fence append is conditional on the token we saw, so
    concurrent fencers serialize; a newer token of ours, a non-s2_sink token or (unless `may_take_over`)
    another s2_sink writer's token raises FencedError.
    """
    name = stream.name
    seen: str = str(mine) if current is None else current
    waits = _BACKOFF.delays()
    for _ in range(_MAX_ROUNDS + _BACKOFF.retries):
        adopt = judge_current_token(name, seen, mine, may_take_over=may_take_over)
        if adopt is not None and not bump and seen != str(mine):
            return FenceResult(adopt, None)
        # Otherwise fence with ours; when seen == mine, that is a redundant fence proving the token is ours.
        target = adopt.next_gen() if adopt is not None and bump else mine
        try:
            ack = await stream.append(
                AppendInput(records=[CommandRecord.fence(target.encode())], fencing_token=seen)
            )
        except FencingTokenMismatchError as exc:
            seen = exc.expected_fencing_token
            continue
        except (S2ClientError, S2ServerError) as exc:
            # Transport errors and 5xx: the fence is conditional, so trying again cannot apply it twice (if
            # it landed, the next try gets a 412 that shows our token).
            delay = next(waits, None) if retryable(exc) else None
            if delay is None:
                raise
            await asyncio.sleep(delay)
            continue
        log.debug("fenced stream=%s token=%s (was %r) at=%s", name, target, seen, ack.end.seq_num)
        return FenceResult(target, ack.end.seq_num)
    raise FencedError(f"could not fence stream {name!r}: its token kept changing (last seen {seen!r})")
