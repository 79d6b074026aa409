"""The exactly-once parts of a micro-batch's write plan, built in one place for both front doors.

`S2Writer` (one epoch per run, `coordinator`) and the ``format("s2")`` sink (one epoch per micro-batch
execution, `sink_run`) differ in when they open an epoch and how a replay is laid out, not in what a task
needs to write under it: `epoch_plan` builds that, and `already_committed` is the one "the ledger has this
batch, write nothing" check.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from s2_sink._exactly_once.ends_cache import EndsRef
from s2_sink._exactly_once.fencing import Token
from s2_sink._exactly_once.ledger import LedgerState
from s2_sink._exactly_once.roll_call import RollCall
from s2_sink._exactly_once.tags import TAG_RESERVE_BYTES
from s2_sink._exactly_once.task import Dedupe, Replay, Tagger, TokenKeeper
from s2_sink.config import S2Config

__all__ = ["EpochPlan", "already_committed", "epoch_plan"]

log = logging.getLogger(__name__)

# A blind re-send of a chunk that may already be applied could duplicate it: under exactly-once the SDK
# retries only what certainly had no side effects, and the task retry's dedupe hook sorts out the rest.
_RETRY_POLICY: Final = "NO_SIDE_EFFECTS"


@dataclass(frozen=True, slots=True)
class EpochPlan:
    """How the tasks write one micro-batch under an exactly-once epoch; the pieces go into the `WritePlan`."""

    cfg: S2Config
    """The writer's config with the ``NO_SIDE_EFFECTS`` append retry policy."""
    token: str
    """The epoch's fencing token, sent with every append."""
    tagger: Tagger
    keeper: TokenKeeper
    dedupe: Dedupe

    @property
    def recovery(self) -> bool:
        """A replay after a driver restart: an earlier run may have written part of the micro-batch."""
        return self.dedupe.recovery

    @property
    def tag_reserve(self) -> int:
        """Metered bytes every append keeps free for the chunk tag."""
        return TAG_RESERVE_BYTES


def epoch_plan(
    cfg: S2Config,
    writer: str,
    epoch: int,
    starts: Mapping[str, int] | EndsRef,
    *,
    recovery: bool,
    roll: RollCall,
    replay: Replay = "content",
) -> EpochPlan:
    """The plan of writer hash `writer` in `epoch`; `starts` are the last commit's stream ends (all of
    them, or an `EndsRef` that names where the ledger has them), `roll` where the micro-batch's task
    attempts sign in."""
    eo_cfg = cfg.replace(append_retry_policy=_RETRY_POLICY)
    ends = starts if isinstance(starts, EndsRef) else EndsRef(roll.writer_id, dict(starts))
    token = Token(epoch=epoch, gen=0, writer=writer).encode()
    return EpochPlan(
        cfg=eo_cfg,
        token=token,
        tagger=Tagger(writer, epoch),
        keeper=TokenKeeper(eo_cfg, token, ends),
        dedupe=Dedupe(
            cfg=eo_cfg,
            token=token,
            writer=writer,
            epoch=epoch,
            recovery=recovery,
            starts=ends,
            roll=roll,
            replay=replay,
        ),
    )


def already_committed(state: LedgerState, writer_id: str, batch_id: int) -> bool:
    """Whether the ledger already has `batch_id` (a replay after Spark lost its own commit): write nothing."""
    if batch_id > state.committed:
        return False
    log.info(
        "exactly-once: batch %s of writer %s already committed (ledger at %s); writing nothing",
        batch_id,
        writer_id,
        state.committed,
    )
    return True
