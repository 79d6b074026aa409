"""Where record-frame rows become records: one Arrow batch at a time, columns to SDK ``Record`` objects
(without building per-row dicts) with their metered sizes, each good row handed to the `Chunker` under its
target stream, each bad one to `BadRows`.

The frame is ``_s2_body``, ``_s2_headers`` (may be absent: no headers), ``_s2_timestamp``, ``_s2_key``,
``_s2_error`` (see `s2_sink.encoders._frame`), plus, when rows are routed, ``WritePlan.stream_column``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc
from s2_sdk import Record

from s2_sink._chunker import Chunker
from s2_sink._dead_letters import BadRows
from s2_sink._write_plan import WritePlan
from s2_sink.encoders._frame import BODY, ERROR, HEADERS, TIMESTAMP
from s2_sink.encoders._metered import metered_bytes

__all__ = ["FrameInput"]


class FrameInput:
    """Feeds one task's frame batches, row by row in order, to a chunker."""

    __slots__ = ("bad_rows", "chunker", "max_record", "plan", "rows_in")

    def __init__(self, plan: WritePlan, chunker: Chunker[Record], bad_rows: BadRows, max_record: int) -> None:
        self.plan = plan
        self.chunker = chunker
        self.bad_rows = bad_rows
        self.max_record = max_record
        """Records over this many metered bytes are bad rows (S2's limit less the chunk tag reserve)."""
        self.rows_in = 0

    def consume(self, batch: pa.RecordBatch) -> None:
        """Turn one Arrow batch of the frame into records and hand them on, in row order."""
        n = batch.num_rows
        if n == 0:
            return
        first_row = self.rows_in
        self.rows_in += n
        names = batch.schema.names
        body_col = batch.column(BODY)
        bodies: list[bytes | None] = body_col.to_pylist()
        header_col = batch.column(HEADERS) if HEADERS in names else None
        headers = _headers(header_col) if header_col is not None else None
        # A null body is a bad row: its size is never used.
        sizes_col = pc.fill_null(metered_bytes(body_col, header_col), 0).to_numpy(zero_copy_only=False)
        stamps: list[int | None] | None = None
        if TIMESTAMP in names and batch.column(TIMESTAMP).null_count < n:
            stamps = batch.column(TIMESTAMP).to_pylist()
        errors: list[str | None] | None = None
        if ERROR in names and batch.column(ERROR).null_count < n:
            errors = batch.column(ERROR).to_pylist()
        targets: list[str | None] | None = None
        if self.plan.stream_column is not None:
            targets = batch.column(self.plan.stream_column).to_pylist()

        hdrs: Iterable[list[tuple[bytes, bytes]] | None] = (
            headers if headers is not None else itertools.repeat(None, n)
        )
        tss: Iterable[int | None] = stamps if stamps is not None else itertools.repeat(None, n)
        records = [
            Record(b, h or [], t) if b is not None else None
            for b, h, t in zip(bodies, hdrs, tss, strict=False)
        ]

        if (
            errors is None
            and targets is None
            and self.plan.stream is not None
            and int(sizes_col.max()) <= self.max_record
            and None not in bodies
        ):
            self.chunker.add_run(self.plan.stream, records, sizes_col)  # type: ignore[arg-type]
            return

        sizes: list[int] = sizes_col.tolist()

        fixed = self.plan.stream
        for i in range(n):
            rec = records[i]
            err = errors[i] if errors is not None else None
            target = targets[i] if targets is not None else fixed
            if err is None:
                if target is None:
                    err = self.plan.null_target
                elif rec is None:
                    err = f"{BODY} is null"
                elif sizes[i] > self.max_record:
                    err = f"record of {sizes[i]} metered bytes exceeds the {self.max_record}-byte limit"
            if err is not None:
                letter = self.bad_rows.handle(batch, i, first_row + i, err, target)
                if letter is not None:
                    assert self.plan.dlq_stream is not None
                    self.chunker.add(self.plan.dlq_stream, *letter)
                continue
            assert rec is not None
            assert target is not None
            self.chunker.add(target, rec, sizes[i])


def _headers(col: pa.Array) -> list[list[tuple[bytes, bytes]] | None]:
    """``array<struct<name,value>>`` -> per-row header lists, via the flat child arrays (no dicts)."""
    if col.null_count == len(col) or len(col.values) == 0:
        return [None] * len(col)
    offsets: list[int] = col.offsets.to_pylist()
    flat = col.values
    names: list[bytes] = flat.field("name").to_pylist()
    values: list[bytes] = flat.field("value").to_pylist()
    pairs = list(zip(names, values, strict=True))
    valid = col.is_valid().to_pylist() if col.null_count else None
    out: list[list[tuple[bytes, bytes]] | None] = []
    for i in range(len(col)):
        lo, hi = offsets[i], offsets[i + 1]
        out.append(pairs[lo:hi] if hi > lo and (valid is None or valid[i]) else None)
    return out
