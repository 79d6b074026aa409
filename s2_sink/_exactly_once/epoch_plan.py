"""The exactly-once parts of a micro-batch's write plan, built in one place for both front doors."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar, Final

from s2_sink._exactly_once.ends_cache import EndsRef
from s2_sink._exactly_once.fencing import Token
from s2_sink._exactly_once.ledger import LedgerState
from s2_sink._exactly_once.tags import TAG_RESERVE_BYTES
from s2_sink._exactly_once.task_hooks import Dedupe, Replay, Tagger, TokenKeeper
from s2_sink.config import S2Config

__all__ = ["EpochPlan", "already_committed", "epoch_plan", "newest_tokens"]

log = logging.getLogger(__name__)

# A blind re-send of a chunk that may already be applied could duplicate it: under exactly-once the SDK
# retries only what certainly had no side effects, and the task retry's dedupe hook sorts out the rest.
_RETRY_POLICY: Final = "NO_SIDE_EFFECTS"


@dataclass(frozen=True, slots=True)
class EpochPlan:
    """How the tasks write one micro-batch under an exactly-once epoch; the pieces go into the `WritePlan`."""

    cfg: S2Config  # with the NO_SIDE_EFFECTS append retry policy
    token: str
    tagger: Tagger
    keeper: TokenKeeper
    dedupe: Dedupe
    tag_reserve: ClassVar[int] = TAG_RESERVE_BYTES
    # Per stream, a newer generation an earlier batch's task retry left there: tasks start with it (no 412).
    tokens: Mapping[str, str] = field(default_factory=dict)

    @property
    def recovery(self) -> bool:
        return self.dedupe.recovery


def epoch_plan(
    cfg: S2Config,
    writer: str,
    epoch: int,
    starts: Mapping[str, int] | EndsRef,
    *,
    recovery: bool,
    writer_id: str,
    replay: Replay = "content",
    tokens: Mapping[str, str] | None = None,
) -> EpochPlan:
    """The plan of writer hash `writer` in `epoch` from the last commit's ends `starts`; of `tokens` (per
    stream, the last earlier tasks appended with) only this epoch's newer generations are shipped."""
    eo_cfg = cfg.replace(append_retry_policy=_RETRY_POLICY)
    ends = starts if isinstance(starts, EndsRef) else EndsRef(writer_id, dict(starts))
    mine = Token(epoch=epoch, gen=0, writer=writer)
    token = mine.encode()
    return EpochPlan(
        tokens=_newer_generations(tokens or {}, writer, epoch),
        cfg=eo_cfg,
        token=token,
        tagger=Tagger(writer, epoch),
        keeper=TokenKeeper(eo_cfg, mine, ends),
        dedupe=Dedupe(
            cfg=eo_cfg,
            token=token,
            writer=writer,
            epoch=epoch,
            recovery=recovery,
            starts=ends,
            replay=replay,
        ),
    )


def newest_tokens(tokens: Mapping[str, str], reported: Mapping[str, Iterable[str]]) -> dict[str, str]:
    out = dict(tokens)
    for stream, texts in reported.items():
        for text in texts:
            new, old = Token.parse(text), Token.parse(out.get(stream, ""))
            if new is not None and (old is None or (old.writer == new.writer and new > old)):
                out[stream] = text
    return out


# Newer generations a plan carries, highest first: it must not grow with the routed streams written.
_MAX_SHIPPED_TOKENS = 16


def _newer_generations(tokens: Mapping[str, str], writer: str, epoch: int) -> dict[str, str]:
    newer: list[tuple[int, str, str]] = []
    for stream, text in tokens.items():
        token = Token.parse(text)
        if token is not None and (token.writer, token.epoch) == (writer, epoch) and token.gen > 0:
            newer.append((token.gen, stream, text))
    newer.sort(reverse=True)
    return {stream: text for _, stream, text in newer[:_MAX_SHIPPED_TOKENS]}


def already_committed(state: LedgerState, writer_id: str, batch_id: int) -> bool:
    """Whether the ledger has `batch_id` (Spark lost its own commit): write nothing."""
    if batch_id > state.committed:
        return False
    log.info(
        "exactly-once: batch %s of writer %s already committed (ledger at %s); writing nothing",
        batch_id,
        writer_id,
        state.committed,
    )
    return True
