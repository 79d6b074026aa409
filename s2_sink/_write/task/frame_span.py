"""Records of the bulk append path: runs of record-frame rows, serialized once per Arrow batch in bulk
(`s2_sink._wire`), and a chunk's ``AppendInput`` joined from those bytes (or from SDK records).

A chunk is serialized once, without a fencing token: the token is the message's last field, so the
appender adds it when sending (`s2_sink._wire.fencing_token_field`) and a token change after a 412
re-sends the same record bytes under a new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
from s2_sdk import AppendInput, Record

from s2_sink._transport.sdk import append_input_to_proto
from s2_sink._wire import EncodedRecords, LeadingHeader, encode_records, record_field

__all__ = ["FrameSpan", "records_of", "serialize_records", "serialize_spans"]

Header = tuple[bytes, bytes]


@dataclass(frozen=True, slots=True)
class FrameSpan:
    """Rows ``lo:hi`` of one record-frame batch, all good records: its ``_s2_body`` (no nulls),
    ``_s2_headers`` and ``_s2_timestamp`` (``None``: the frame has no such column), the headers every
    record carries ahead of its own (``leading``: the upsert changelog's flat form), and every row of the
    batch already serialized (`s2_sink._wire.encode_records`, once per batch, shared by its spans)."""

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
        """All rows of a batch, serialized in bulk (raises `EncodeError` for a row S2 cannot take)."""
        encoded = encode_records(body, headers, timestamp, leading)
        return cls(body, headers, timestamp, tuple(leading), encoded, 0, len(body))

    def __len__(self) -> int:
        return self.hi - self.lo

    def slice(self, lo: int, hi: int) -> FrameSpan:
        """Rows ``lo:hi`` of this span."""
        return replace(self, lo=self.lo + lo, hi=self.lo + hi)

    def wire(self, lo: int) -> memoryview:
        """The serialized ``records`` fields of rows ``lo:`` of this span (a view, no copy)."""
        offsets = self.encoded.offsets
        return self.encoded.data[offsets[self.lo + lo] : offsets[self.hi]].data

    def record(self, i: int) -> tuple[bytes, list[Header], int | None]:
        """Row ``i`` of this span: body, headers, timestamp."""
        row = self.lo + i
        body: bytes = self.body[row].as_py()
        headers = self.headers[row].as_py() if self.headers is not None else None
        stamp: int | None = self.timestamp[row].as_py() if self.timestamp is not None else None
        lead = [(name, column[row].as_py()) for name, column in self.leading]
        return body, [*lead, *((h["name"], h["value"]) for h in headers or ())], stamp

    def columns(self) -> tuple[pa.Array, pa.Array | None, pa.Array | None, list[LeadingHeader]]:
        """The span's rows of each column (body, headers, timestamp, the leading headers')."""
        n = len(self)
        return (
            self.body.slice(self.lo, n),
            None if self.headers is None else self.headers.slice(self.lo, n),
            None if self.timestamp is None else self.timestamp.slice(self.lo, n),
            [(name, column.slice(self.lo, n)) for name, column in self.leading],
        )


def serialize_spans(spans: Sequence[FrameSpan], tag: Header | None) -> bytes:
    """One ``AppendInput`` (no fencing token) holding the spans' rows in order: the rows' bytes as
    serialized per batch, joined; with a `tag`, the first record is serialized again with the tag after
    its own headers (the exactly-once chunk tag goes last)."""
    parts: list[bytes | memoryview] = []
    skip = 0
    if tag is not None:
        body, headers, stamp = spans[0].record(0)
        parts.append(record_field(body, [*headers, tag], stamp))
        skip = 1
    for k, span in enumerate(spans):
        parts.append(span.wire(skip if k == 0 else 0))
    return b"".join(parts)


def serialize_records(records: list[Record]) -> bytes:
    """One ``AppendInput`` (no fencing token) of SDK records, serialized by the SDK's own mapping (the
    record path's chunks, when they travel on a bulk session)."""
    data: bytes = append_input_to_proto(AppendInput(records=records)).SerializeToString()
    return data


def records_of(spans: Sequence[FrameSpan]) -> list[Record]:
    """The spans' rows as SDK records (a chunk that mixes spans with records takes the record path)."""
    out: list[Record] = []
    for span in spans:
        body, header_col, stamp_col, leading = span.columns()
        n = len(span)
        bodies: list[bytes] = body.to_pylist()
        headers = header_col.to_pylist() if header_col is not None else [None] * n
        stamps = stamp_col.to_pylist() if stamp_col is not None else [None] * n
        leads = [[(name, value) for value in column.to_pylist()] for name, column in leading]
        for i, (b, hs, ts) in enumerate(zip(bodies, headers, stamps, strict=True)):
            pairs = [lead[i] for lead in leads]
            pairs += [(h["name"], h["value"]) for h in hs or ()]
            out.append(Record(b, pairs, ts))
    return out
