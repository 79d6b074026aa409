"""Finding the few records of an otherwise plain ``AppendInput`` that are not body-only.

An exactly-once writer tags the first record of every append with a header; every other record is body-only.
Such an input is kept in the plain (bulk) stored form with its few other records set aside, and finding them
must cost about as little as the plain check itself: no Python step per record.

Both searches rest on one size identity. ``PlainProbe`` (bodies only) without its unknown fields is the input
with every record made body-only, so

    len(data) - size(PlainProbe without unknown fields)
        == sum over the records that are not body-only of (their length - that of their body-only form)

when the records counted as body-only are in the canonical layout (``1a <len> <body>``, nothing else) that the
plain form relies on. Anything else (an unknown field, a repeated body, an explicitly empty body, an over-long
varint, an unknown top-level field) adds bytes to the left side that nothing on the right accounts for. So a
search that accounts for all of the surplus with the records it found proves the others canonical.

* From the front (the writers' layout): the first few records, one Python step each, until they account for
  the whole surplus.
* Anywhere: ``HeaderProbe`` (records without their body) serializes, once unknown fields are dropped, to
  ``0a 00`` per body-only record and to the encoded timestamp and headers of every other one, so a regex over
  that short output finds the few records and their headers.

The records found are decoded from their fields (in whatever order they came), as on every other path.
"""

from __future__ import annotations

import re
from typing import Any, Final, NamedTuple

from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from s2_sink.lite._wire import HeaderProbe, pb

__all__ = ["Exceptions", "find_exceptions"]

_PLAIN_RUN: Final = re.compile(rb"(?:\x0a\x00)*")
_RECORDS_KEY: Final = 0x0A
#: How far the walk from the front looks (a Python step per record) before the general search takes over.
_FRONT_RECORDS: Final = 8


class Exceptions(NamedTuple):
    """The records of an input that are not body-only, decoded."""

    records: list[tuple[int, Any]]
    """(record index, ``AppendRecord`` with timestamp, headers and body) in index order."""
    header_bytes: int
    """Metered bytes of their headers (2 + name + value each)."""


def find_exceptions(data: bytes, probe: Any, surplus: int) -> Exceptions | None:
    """The non-body-only records of `data`, or None if the input is not canonical (see the module doc).

    `probe` is `data` parsed as ``PlainProbe`` with unknown fields discarded (its bodies are read here), and
    `surplus` is ``len(data)`` minus its size.
    """
    try:
        return _from_the_front(data, probe, surplus) or _by_header_probe(data, probe, surplus)
    except DecodeError:  # a malformed header: the caller's full validation reports it
        return None


def _from_the_front(data: bytes, probe: Any, surplus: int) -> Exceptions | None:
    """The writers' layout (the tagged record first): walk the first few records until they account for
    the whole surplus, which leaves none for the records after them (so those are canonical)."""
    records: list[tuple[int, Any]] = []
    header_bytes = 0
    left = surplus
    pos = 0
    bodies = probe.records
    for idx in range(min(_FRONT_RECORDS, len(bodies))):
        if pos >= len(data) or data[pos] != _RECORDS_KEY:
            return None  # the records are not first: leave it to the general search
        length, at = _varint(data, pos + 1)
        end = at + length
        body = bodies[idx].body
        extra = end - pos - _field_size(_field_size(len(body)) if body else 0)
        if extra:
            rec = pb.AppendRecord.FromString(data[at:end])
            if not (rec.headers or rec.HasField("timestamp")) or rec.ByteSize() != length:
                return None  # not canonical: a body-only record written otherwise, or an over-long field
            records.append((idx, rec))
            header_bytes += sum(2 + len(h.name) + len(h.value) for h in rec.headers)
            left -= extra
            if left <= 0:
                break
        pos = end
    return Exceptions(records, header_bytes) if left == 0 and records else None


def _by_header_probe(data: bytes, probe: Any, surplus: int) -> Exceptions | None:
    """Anywhere in the input: ``HeaderProbe`` finds them (about as costly as the plain check again)."""
    heads = HeaderProbe.FromString(data)
    heads.DiscardUnknownFields()
    out: bytes = heads.SerializeToString()
    records: list[tuple[int, Any]] = []
    header_bytes = 0
    explained = 0
    pos = idx = 0
    end = len(out)
    while True:
        run = _PLAIN_RUN.match(out, pos)
        assert run is not None  # matches the empty string at least
        idx += (run.end() - pos) // 2
        pos = run.end()
        if pos >= end:
            break
        # ``0a <len> <timestamp and headers>``: HeaderProbe writes its records in canonical form.
        length, at = _varint(out, pos + 1)
        pos = at + length
        rec = pb.AppendRecord.FromString(out[at:pos])
        body = probe.records[idx].body
        rec.body = body
        records.append((idx, rec))
        header_bytes += sum(2 + len(h.name) + len(h.value) for h in rec.headers)
        # This record in canonical form against the body-only record PlainProbe made of it.
        canonical_body = _field_size(len(body)) if body else 0
        explained += _field_size(length + canonical_body) - _field_size(canonical_body)
        idx += 1
    if explained != surplus or idx != len(probe.records):
        return None
    return Exceptions(records, header_bytes)


def _field_size(length: int) -> int:
    """Bytes of a length-delimited field with a one-byte key and a `length`-byte value."""
    return 1 + max(1, (length.bit_length() + 6) // 7) + length


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
