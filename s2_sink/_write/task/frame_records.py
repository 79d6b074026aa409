"""Where record-frame rows become records, one Arrow batch at a time: each good row handed to the
`Chunker` under its target stream, each bad one to `BadRows` (a routed target no rows may go to included).

A batch of good rows takes the bulk path: its rows serialized once (`s2_sink._wire`) and handed on as
`FrameSpan`s, no Python object per row; routed, grouped by target first (a stable sort: a stream's rows
keep their order) so that each stream's rows are one run, cut into few appends. A batch with bad rows
takes the record path, row by row, with SDK ``Record``s. Chunks are serialized without a fencing token:
the appender adds it (the message's last field), so a token change re-sends the same bytes.

In the upsert changelog's flat form (``_s2_action``) the bulk path writes ``@key``/``@action`` from the
columns; the record path puts them back into ``_s2_headers`` first (`s2_sink.encoders._changelog`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from s2_sdk import AppendInput, Record

from s2_sink._stream_names import shown, target_problem
from s2_sink._transport.sdk import append_input_to_proto
from s2_sink._wire.append.proto import EncodedRecords, LeadingHeader, encode_records, row_field
from s2_sink._write.task.chunker import Chunker
from s2_sink._write.task.dead_letters import BadRows
from s2_sink._write.write_plan import WritePlan
from s2_sink.encoders._changelog import changelog_metered, leading_headers, with_changelog_headers
from s2_sink.encoders._frame import ACTION, BODY, ERROR, HEADERS, KEY, TIMESTAMP, stream_texts
from s2_sink.encoders._metered import metered_bytes

__all__ = ["FrameInput", "FrameSpan", "records_of", "serialize_records", "serialize_spans"]

Header = tuple[bytes, bytes]


class FrameInput:
    __slots__ = (
        "bad_rows",
        "chunker",
        "ended",
        "good_targets",
        "max_record",
        "plan",
        "rows_in",
        "spans",
        "stream_now",
    )

    def __init__(
        self,
        plan: WritePlan,
        chunker: Chunker[Record | FrameSpan],
        bad_rows: BadRows,
        max_record: int,
        ended: Callable[[str], None] | None = None,
    ) -> None:
        self.plan = plan
        self.ended = ended if plan.rows_by_stream else None
        """Told of a stream whose rows have ended (the task's rows come ordered by stream)."""
        self.stream_now: str | None = None
        self.chunker = chunker
        self.bad_rows = bad_rows
        self.max_record = max_record
        """S2's limit less the chunk tag reserve."""
        self.rows_in = 0
        self.spans = False
        """Take the bulk path."""
        self.good_targets: set[str | None] = {None}
        """Routed targets known to be good (None: a null target, handled apart)."""

    def consume(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        first_row = self.rows_in
        self.rows_in += n
        names = batch.schema.names
        body_col = batch.column(BODY)
        header_col = batch.column(HEADERS) if HEADERS in names else None
        metered = metered_bytes(body_col, header_col)
        if ACTION in names:
            metered = pc.add(metered, changelog_metered(batch.column(KEY), batch.column(ACTION)))
        # A null body is a bad row: its size is never used.
        sizes = pc.fill_null(metered, 0).to_numpy(zero_copy_only=False)
        stamp_col = batch.column(TIMESTAMP) if TIMESTAMP in names else None
        has_errors = ERROR in names and batch.column(ERROR).null_count < n
        stream = self.plan.stream
        routed = self.plan.stream_column is not None
        clean = not has_errors and body_col.null_count == 0 and int(sizes.max()) <= self.max_record
        all_good = clean and not routed and stream is not None
        if all_good and self.spans:
            assert stream is not None
            span = FrameSpan.of(body_col, header_col, stamp_col, leading_headers(batch))
            self.chunker.add_span(stream, sizes, span.slice)
            return
        if clean and routed and self.spans and self._grouped(batch, sizes):
            return
        if ACTION in names:
            batch = with_changelog_headers(batch)
            header_col = batch.column(HEADERS)
        records = _records(body_col, header_col, stamp_col)
        if all_good:
            assert stream is not None
            self.chunker.add_run(stream, records, sizes)  # type: ignore[arg-type]
            return
        errors: list[str | None] | None = batch.column(ERROR).to_pylist() if has_errors else None
        self._row_by_row(batch, first_row, records, sizes.tolist(), errors)

    def _grouped(self, batch: pa.RecordBatch, sizes: npt.NDArray[np.int64]) -> bool:
        """A routed batch of good records handed on as one span per stream; False (nothing handed on) when
        a target is null or bad."""
        assert self.plan.stream_column is not None
        targets = batch.column(self.plan.stream_column)
        if targets.null_count:
            return False
        encoded = pc.dictionary_encode(targets)
        names = stream_texts(encoded.dictionary)
        if self._bad_targets(names):
            return False
        ids = encoded.indices.to_numpy(zero_copy_only=False)
        order = np.argsort(ids, kind="stable")  # streams in order of first appearance, rows in order
        grouped = batch.take(pa.array(order))
        ids = ids[order]
        sizes = sizes[order]
        starts = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist()]
        ends = [*starts[1:], len(ids)]
        body = grouped.column(BODY)
        names_in = grouped.schema.names
        span = FrameSpan.of(
            body,
            grouped.column(HEADERS) if HEADERS in names_in else None,
            grouped.column(TIMESTAMP) if TIMESTAMP in names_in else None,
            leading_headers(grouped),
        )
        # Each run's total size at once (one numpy call per stream costs more than its few rows).
        totals = np.add.reduceat(sizes, starts).tolist()
        for lo, hi, total in zip(starts, ends, totals, strict=True):
            stream = names[int(ids[lo])]
            assert stream is not None
            if self.ended is not None and self.stream_now not in (None, stream):
                self.ended(self.stream_now)  # rows ordered by stream: the previous stream's have ended
            self.stream_now = stream
            self.chunker.add_span(stream, sizes[lo:hi], _shifted(span, lo), total)
        return True

    def _row_by_row(
        self,
        batch: pa.RecordBatch,
        first_row: int,
        records: list[Record | None],
        sizes: list[int],
        errors: list[str | None] | None,
    ) -> None:
        targets: list[str | None] | None = None
        bad_targets: dict[str, str] = {}
        if self.plan.stream_column is not None:
            targets = stream_texts(batch.column(self.plan.stream_column))
            bad_targets = self._bad_targets(targets)
        fixed = self.plan.stream
        # Routed rows are handed on grouped by stream (in order of first appearance, each stream's rows in
        # order), as the bulk path groups them (`_grouped`): the same rows make the same chunks either way.
        groups: dict[str, tuple[list[Record], list[int]]] | None = {} if targets is not None else None
        for i, rec in enumerate(records):
            err = errors[i] if errors is not None else None
            target = targets[i] if targets is not None else fixed
            if err is None:
                if target is None:
                    err = self.plan.null_target
                elif bad_targets and target in bad_targets:
                    err = bad_targets[target]
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
            if groups is None:
                self.chunker.add(target, rec, sizes[i])
                continue
            group = groups.get(target)
            if group is None:
                group = groups[target] = ([], [])
            group[0].append(rec)
            group[1].append(sizes[i])
        for target, (recs, rec_sizes) in (groups or {}).items():
            self.chunker.add_run(target, recs, rec_sizes)

    def _bad_targets(self, targets: list[str | None]) -> dict[str, str]:
        """Each distinct routed target rows may not go to, with the reason: a bad row (an append to it would
        fail every replay, or land in the sink's bookkeeping)."""
        bad: dict[str, str] = {}
        for target in set(targets).difference(self.good_targets):
            assert target is not None  # None is in good_targets
            problem = target_problem(target)
            if problem is None:
                self.good_targets.add(target)
            else:
                bad[target] = f"routing value {shown(target)} of {self.plan.routed_by} {problem}"
        return bad


def _shifted(span: FrameSpan, lo: int) -> Callable[[int, int], FrameSpan]:
    return lambda a, b: span.slice(lo + a, lo + b)


def _records(
    body: pa.Array,
    header_col: pa.Array | None,
    stamp_col: pa.Array | None,
    leading: Sequence[LeadingHeader] = (),
) -> list[Record | None]:
    """Each row as an SDK record, the `leading` headers first (``None`` where the body is null)."""
    n = len(body)
    headers: list[list[Header] | None] = [None] * n if header_col is None else _headers(header_col)
    stamps = stamp_col.to_pylist() if stamp_col is not None and stamp_col.null_count < n else [None] * n
    if leading:
        leads = [[(name, value) for value in column.to_pylist()] for name, column in leading]
        headers = [[*(lead[i] for lead in leads), *(h or ())] for i, h in enumerate(headers)]
    return [
        Record(b, h or [], t) if b is not None else None
        for b, h, t in zip(body.to_pylist(), headers, stamps, strict=True)
    ]


def _headers(col: pa.Array) -> list[list[Header] | None]:
    """Per-row header lists from the flat child arrays (no dicts)."""
    if col.null_count == len(col) or len(col.values) == 0:
        return [None] * len(col)
    offsets: list[int] = col.offsets.to_pylist()
    flat = col.values
    names: list[bytes] = flat.field("name").to_pylist()
    values: list[bytes] = flat.field("value").to_pylist()
    pairs = list(zip(names, values, strict=True))
    valid = col.is_valid().to_pylist() if col.null_count else None
    out: list[list[Header] | None] = []
    for i in range(len(col)):
        lo, hi = offsets[i], offsets[i + 1]
        out.append(pairs[lo:hi] if hi > lo and (valid is None or valid[i]) else None)
    return out


@dataclass(frozen=True, slots=True)
class FrameSpan:
    """Rows ``lo:hi`` of one record-frame batch of good records (``None``: no such column; ``leading``: the
    changelog's flat form), with every row of the batch serialized once, shared by its spans."""

    body: pa.Array
    headers: pa.Array | None
    timestamp: pa.Array | None
    leading: tuple[LeadingHeader, ...]
    encoded: EncodedRecords
    lo: int
    hi: int

    @classmethod
    def of(
        cls,
        body: pa.Array,
        headers: pa.Array | None,
        timestamp: pa.Array | None,
        leading: Sequence[LeadingHeader] = (),
    ) -> FrameSpan:
        """Raises `EncodeError` for a row S2 cannot take."""
        encoded = encode_records(body, headers, timestamp, leading)
        return cls(body, headers, timestamp, tuple(leading), encoded, 0, len(body))

    def __len__(self) -> int:
        return self.hi - self.lo

    def slice(self, lo: int, hi: int) -> FrameSpan:
        """Built directly: ``dataclasses.replace`` costs twice as much, once per stream and batch."""
        at = self.lo
        return FrameSpan(
            self.body, self.headers, self.timestamp, self.leading, self.encoded, at + lo, at + hi
        )

    def wire(self, lo: int) -> memoryview:
        offsets = self.encoded.offsets
        return self.encoded.data[offsets[self.lo + lo] : offsets[self.hi]].data

    def columns(self) -> tuple[pa.Array, pa.Array | None, pa.Array | None, list[LeadingHeader]]:
        n = len(self)
        return (
            self.body.slice(self.lo, n),
            None if self.headers is None else self.headers.slice(self.lo, n),
            None if self.timestamp is None else self.timestamp.slice(self.lo, n),
            [(name, column.slice(self.lo, n)) for name, column in self.leading],
        )


def serialize_spans(spans: Sequence[FrameSpan], tag: Header | None) -> bytes:
    """One ``AppendInput`` (no fencing token) of the spans' rows; a `tag` goes after the first record's own
    headers."""
    parts: list[bytes | memoryview] = []
    skip = 0
    if tag is not None:
        first = spans[0]
        parts.append(
            row_field(first.lo, first.body, first.headers, first.timestamp, first.leading, extra=[tag])
        )
        skip = 1
    for k, span in enumerate(spans):
        parts.append(span.wire(skip if k == 0 else 0))
    return b"".join(parts)


def serialize_records(records: list[Record]) -> bytes:
    """One ``AppendInput`` (no fencing token) of SDK records, by the SDK's own mapping."""
    data: bytes = append_input_to_proto(AppendInput(records=records)).SerializeToString()
    return data


def records_of(spans: Sequence[FrameSpan]) -> list[Record]:
    """The spans' rows as SDK records (a chunk that mixes spans with records takes the record path)."""
    return [r for span in spans for r in _records(*span.columns()) if r is not None]
