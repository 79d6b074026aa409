"""The exactly-once delivery mode of `S2Writer` (``delivery="exactly-once"``, the default).

It plugs into the writer's two driver-side steps:

- ``prepare``: refuse speculative execution; resolve the writer identity (``writer_id``, else the
  streaming query id); ask the ledger whether the batch is already committed (then write nothing);
  otherwise add the run's fencing token, the chunk tagger, the token keeper and the dedupe hook to the
  write plan, force the SDK's ``NO_SIDE_EFFECTS`` retry policy (a blind re-send could duplicate), and —
  for the replay of a batch a previous run may have partly written — repartition the record frame by
  record content so every copy of a record is written by one task.
- ``commit``: append the batch's ``commit`` record (with the streams' end positions) to the ledger.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from pyspark.sql import functions as F

from s2_sink._exactly_once._coordinator import Coordinator
from s2_sink._exactly_once._identity import check_no_speculation, resolve_identity
from s2_sink._exactly_once._tags import TAG_RESERVE_BYTES

if TYPE_CHECKING:
    from s2_sink._metrics import BatchMetrics
    from s2_sink.writer import BatchJob, S2Writer

__all__ = ["ExactlyOnce"]

log = logging.getLogger(__name__)

# Frame columns that make up a record's content (the stream is a function of them, or of columns the
# content was derived from deterministically): identical records hash to the same partition.
_CONTENT = ("_s2_key", "_s2_body", "_s2_headers")


class ExactlyOnce:
    """Ledger-committed, fenced, tag-and-subtract delivery (see docs/exactly-once.md)."""

    name = "exactly-once"

    def __init__(self) -> None:
        self._coord: Coordinator | None = None

    def __getstate__(self) -> dict[str, Any]:
        # SDK clients do not pickle; a deserialized copy (Spark Connect) re-reads the ledger on first use.
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._coord = None

    def prepare(self, writer: S2Writer, job: BatchJob) -> BatchJob | None:
        """The exactly-once job for this micro-batch, or ``None`` if the ledger already has it."""
        spark = job.frame.sparkSession
        check_no_speculation(spark)
        if self._coord is None:
            writer_id, query_id = resolve_identity(writer.writer_id, spark)
            self._coord = Coordinator(
                writer.cfg,
                writer_id,
                query_id=query_id,
                static_streams=writer.routing.known_streams() or [],
            )
        bp = self._coord.begin_batch(job.batch_id)
        if bp is None:
            return None
        frame = job.frame
        if bp.recovery:
            log.warning(
                "exactly-once: batch %s replays after a driver restart; writing it in recovery mode "
                "(repartitioned by record content, read back and subtracted)",
                job.batch_id,
            )
            present = set(frame.columns)  # the writer leaves out the headers column when nothing has headers
            frame = frame.repartition(F.xxhash64(*(F.col(c) for c in _CONTENT if c in present)))
        cfg = job.plan.cfg.replace(append_retry_policy="NO_SIDE_EFFECTS")
        plan = dataclasses.replace(
            job.plan,
            cfg=cfg,
            fencing_token=bp.token,
            chunk_tagger=bp.tagger,
            chunk_tag_reserve=TAG_RESERVE_BYTES,
            recovery=dataclasses.replace(bp.dedupe, cfg=cfg),
            resend_ambiguous=False,
            fence_keeper=dataclasses.replace(bp.keeper, cfg=cfg),
        )
        return type(job)(job.batch_id, frame, plan)

    def commit(self, writer: S2Writer, job: BatchJob, metrics: BatchMetrics) -> None:
        """Record the batch in the ledger (one conditional append)."""
        assert self._coord is not None
        self._coord.commit_batch(job.batch_id, metrics.end_positions())
