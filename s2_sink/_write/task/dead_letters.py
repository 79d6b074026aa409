"""Bad rows (``_s2_error`` set, null target stream, null body, over 1 MiB), per ``WritePlan.on_error``:
fail the task, skip the row, or write a dead letter to ``WritePlan.dlq_stream``: the row's payload
(``payload_column``, else its ``_s2_body``), cut to fit, with headers saying why and where from.

Under exactly-once a dead letter also carries ``s2sink-row-hash``, the row's content hash as the recovery
layout places it (`layout_hash`). A replay subtracts dead letters by fingerprint like data, so identical
dead letters must come from one task: with the hash in them they do, and a task knows its own.
"""

from __future__ import annotations

import logging
from typing import Final

import pyarrow as pa
from s2_sdk import Record

from s2_sink._exactly_once.recovery_layout import layout_hash
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.encoders._frame import (
    BODY,
    DLQ_BATCH,
    DLQ_ERROR,
    DLQ_PARTITION,
    DLQ_ROW_HASH,
    DLQ_TARGET,
    DLQ_TRUNCATED,
    HEADERS,
    stream_texts,
)
from s2_sink.encoders._metered import header_size, metered_size
from s2_sink.errors import EncodeError

__all__ = [
    "DLQ_BATCH",
    "DLQ_ERROR",
    "DLQ_PARTITION",
    "DLQ_ROW_HASH",
    "DLQ_TARGET",
    "DLQ_TRUNCATED",
    "BadRows",
    "row_hash",
]

log = logging.getLogger(__name__)


_MAX_ERROR_BYTES: Final = 4096
_LOGGED_SKIPS: Final = 3


class BadRows:
    __slots__ = ("ctx", "dead_lettered", "max_record", "plan", "skipped")

    def __init__(self, plan: WritePlan, ctx: PartitionContext, max_record: int) -> None:
        self.plan = plan
        self.ctx = ctx
        self.max_record = max_record
        self.skipped = 0
        self.dead_lettered = 0

    def handle(
        self, batch: pa.RecordBatch, i: int, row: int, err: str, target: str | None
    ) -> tuple[Record, int] | None:
        """Row `i` is bad: raise (``fail``), count it (``skip``: None), or its dead letter and its size."""
        where = f"row {row} of {self.ctx.describe()} in batch {self.plan.batch_id}"
        mode = self.plan.on_error
        if mode == "fail":
            raise EncodeError(f"{where}: {err} (fix or filter such rows, or set on_error='skip' or 'dlq')")
        if mode == "skip":
            self.skipped += 1
            if self.skipped <= _LOGGED_SKIPS:
                log.warning("skipping bad row: %s: %s", where, err)
            return None
        payload: bytes | None = None
        if self.plan.payload_column is not None:
            payload = batch.column(self.plan.payload_column)[i].as_py()
        if payload is None:
            payload = batch.column(BODY)[i].as_py() or b""
        headers = [
            (DLQ_ERROR, err.encode()[:_MAX_ERROR_BYTES]),
            (DLQ_BATCH, str(self.plan.batch_id).encode()),
            (DLQ_PARTITION, str(self.ctx.partition_id).encode()),
            # A poison routing value may be long and not UTF-8: its bytes as Spark had them, cut.
            (DLQ_TARGET, (target or "").encode("utf-8", "surrogateescape")[:_MAX_ERROR_BYTES]),
        ]
        if self.plan.chunk_tagger is not None:  # exactly-once (see module docstring)
            headers.append((DLQ_ROW_HASH, b"%016x" % (row_hash(self.plan, batch, i) & (2**64 - 1))))
        room = self.max_record - metered_size(b"", headers) - header_size(DLQ_TRUNCATED, b"true")
        if len(payload) > room:
            payload = payload[:room]
            headers.append((DLQ_TRUNCATED, b"true"))
        self.dead_lettered += 1
        return Record(payload, headers), metered_size(payload, headers)


def row_hash(plan: WritePlan, batch: pa.RecordBatch, i: int) -> int:
    names = batch.schema.names
    stream = None
    if plan.stream_column in names:
        stream = stream_texts(batch.column(plan.stream_column).slice(i, 1))[0]
    body = batch.column(BODY)[i].as_py() if BODY in names else None
    raw = batch.column(HEADERS)[i].as_py() if HEADERS in names else None
    headers = [(h["name"], h["value"]) for h in raw or ()]
    return layout_hash(stream, headers, body)
