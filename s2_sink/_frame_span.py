"""Records of the bulk append path: runs of record-frame rows kept as Arrow slices, and a chunk's
serialized ``AppendInput`` records written from them in bulk (`s2_sink._wire`), or from SDK records.

A chunk is serialized once, without a fencing token: the token is the message's last field, so the
appender adds it when sending (`s2_sink._wire.fencing_token_field`) and a token change after a 412
re-sends the same record bytes under a new one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
from s2_sdk import AppendInput, Record
from s2_sdk._mappers import append_input_to_proto

from s2_sink._wire import encode_append_inputs

__all__ = ["FrameSpan", "records_of", "serialize_records", "serialize_spans"]

Header = tuple[bytes, bytes]


@dataclass(frozen=True, slots=True)
class FrameSpan:
    """Consecutive rows of one record-frame batch, all good records (slices share the batch's buffers):
    ``_s2_body`` (no nulls), ``_s2_headers`` and ``_s2_timestamp`` (``None``: the frame has no such
    column)."""

    body: pa.Array
    headers: pa.Array | None
    timestamp: pa.Array | None

    def __len__(self) -> int:
        return len(self.body)

    def slice(self, lo: int, hi: int) -> FrameSpan:
        """Rows ``lo:hi`` of this span."""
        n = hi - lo
        return FrameSpan(
            self.body.slice(lo, n),
            None if self.headers is None else self.headers.slice(lo, n),
            None if self.timestamp is None else self.timestamp.slice(lo, n),
        )


def serialize_spans(spans: Sequence[FrameSpan], tag: Header | None) -> bytes:
    """One ``AppendInput`` (no fencing token) holding the spans' rows in order; `tag` is appended to the
    first record's own headers (the exactly-once chunk tag goes last)."""
    body = _concat([s.body for s in spans])
    headers = _column(spans, "headers")
    timestamp = _column(spans, "timestamp")
    [message] = encode_append_inputs(
        body,
        headers,
        timestamp,
        [0, len(body)],
        fencing_token=None,
        first_record_headers=None if tag is None else [[tag]],
    )
    return message


def serialize_records(records: list[Record]) -> bytes:
    """One ``AppendInput`` (no fencing token) of SDK records, serialized by the SDK's own mapping (the
    record path's chunks, when they travel on a bulk session)."""
    data: bytes = append_input_to_proto(AppendInput(records=records)).SerializeToString()
    return data


def records_of(spans: Sequence[FrameSpan]) -> list[Record]:
    """The spans' rows as SDK records (a chunk that mixes spans with records takes the record path)."""
    out: list[Record] = []
    for span in spans:
        n = len(span)
        bodies: list[bytes] = span.body.to_pylist()
        headers = span.headers.to_pylist() if span.headers is not None else [None] * n
        stamps = span.timestamp.to_pylist() if span.timestamp is not None else [None] * n
        for body, hs, ts in zip(bodies, headers, stamps, strict=True):
            pairs = [(h["name"], h["value"]) for h in hs] if hs else []
            out.append(Record(body, pairs, ts))
    return out


def _concat(arrays: list[pa.Array]) -> pa.Array:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _column(spans: Sequence[FrameSpan], name: str) -> pa.Array | None:
    """The spans' `name` column concatenated (``None`` when no span has one; nulls where some lack it)."""
    parts: list[pa.Array | None] = [getattr(s, name) for s in spans]
    present = [p for p in parts if p is not None]
    if not present:
        return None
    typ = present[0].type
    return _concat([p if p is not None else pa.nulls(len(s), typ) for p, s in zip(parts, spans, strict=True)])
