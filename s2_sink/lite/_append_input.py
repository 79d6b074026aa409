"""Decoding and validating one ``AppendInput``: record limits, metered sizes and command records.

The protobuf module parses the input (what it refuses is a 400) and writes it out again in canonical form:
fields in number order, shortest varints, empty and unknown fields dropped. There a record is ``08 <ts>``?
``(12 <len> <header>)*`` ``(1a <len> <body>)``?, a header ``(0a <len> <name>)?`` ``(12 <len> <value>)?``, and
the headers-and-body part of the record's ``SequencedRecord`` (headers = 3, body = 4) is the same bytes after
the timestamp with the top-level keys renumbered. One walk over each record gives its part, its metered size,
its timestamp and its command, if it is one: no Python object per header.
"""

from __future__ import annotations

from dataclasses import dataclass

from s2_sink.lite._api_errors import ApiError, invalid
from s2_sink.lite._wire import RawList, pb

__all__ = ["MAX_BATCH_RECORDS", "ONE_MIB", "ParsedInput", "parse_input"]

ONE_MIB = 1024 * 1024
MAX_BATCH_RECORDS = 1000
MAX_FENCING_TOKEN = 36
_TIMESTAMP, _BODY, _NAME = 0x08, 0x1A, 0x0A
#: The top-level keys of a ``SequencedRecord``'s headers and body.
_SEQ_HEADER, _SEQ_BODY = 0x1A, 0x22


@dataclass(slots=True)
class ParsedInput:
    """A validated ``AppendInput``: records plus what sequencing needs to know about them."""

    #: Each record's headers-and-body part of its ``SequencedRecord`` encoding.
    parts: list[bytes]
    #: Each record's metered size.
    sizes: list[int]
    #: (record index, command op, body) for each command record.
    commands: list[tuple[int, bytes, bytes]]
    #: record index -> client timestamp, for records that carry one.
    client_ts: dict[int, int]
    match_seq_num: int | None
    fencing_token: str | None


def parse_input(data: bytes) -> ParsedInput:
    """Decode and validate an encoded ``AppendInput`` (400 ``bad_proto``, 422 ``invalid``)."""
    try:
        inp = pb.AppendInput.FromString(data)
    except Exception as exc:  # upb raises DecodeError; anything else is malformed input too
        raise ApiError(400, "bad_proto", f"invalid AppendInput: {exc}") from exc
    n = len(inp.records)
    if not 1 <= n <= MAX_BATCH_RECORDS:
        raise invalid(f"a batch must have 1 to 1000 records, got {n}")
    msn = inp.match_seq_num if inp.HasField("match_seq_num") else None
    token = inp.fencing_token if inp.HasField("fencing_token") else None
    inp.DiscardUnknownFields()
    records = RawList.FromString(inp.SerializeToString()).items
    parts: list[bytes] = []
    sizes: list[int] = []
    commands: list[tuple[int, bytes, bytes]] = []
    client_ts: dict[int, int] = {}
    for i, rec in enumerate(records):
        part, size = _record(i, rec, commands, client_ts)
        if size > ONE_MIB:
            raise invalid(f"record {i} is {size} metered bytes, more than 1 MiB")
        parts.append(part)
        sizes.append(size)
    metered = sum(sizes)
    if metered > ONE_MIB:
        raise invalid(f"a batch may hold at most 1 MiB of metered bytes, got {metered}")
    _check_commands(commands)
    if token is not None and len(token.encode()) > MAX_FENCING_TOKEN:
        # The input's own token is held to a fence's limit, after its records (api/src/v1/stream/proto).
        raise invalid(f"fencing token must not exceed {MAX_FENCING_TOKEN} bytes in length")
    return ParsedInput(parts, sizes, commands, client_ts, msn, token)


def _record(
    i: int, rec: bytes, commands: list[tuple[int, bytes, bytes]], client_ts: dict[int, int]
) -> tuple[bytes, int]:
    """Record `i`, canonically encoded: its headers-and-body part and metered size (8 + 2 per header + names +
    values + body); notes its timestamp and, if it is one, its command."""
    pos = 0
    if rec and rec[0] == _TIMESTAMP:
        client_ts[i], pos = _varint(rec, 1)
    if pos == len(rec):
        return b"", 8
    if rec[pos] == _BODY:  # body only: one key to renumber
        length, _ = _varint(rec, pos + 1)
        return b"\x22" + rec[pos + 1 :], 8 + length
    part = bytearray(rec[pos:])
    size = 8
    headers = 0
    op: bytes | None = None
    body = slice(0, 0)
    at = 0
    # Each length is read inline where it takes one byte (most do), by `_varint` where it takes more.
    while at < len(part):
        key_at = at
        length, start = part[at + 1], at + 2
        if length > 0x7F:
            length, start = _varint(part, at + 1)
        at = start + length
        if part[key_at] == _BODY:  # the last field
            part[key_at] = _SEQ_BODY
            size += length
            body = slice(start, at)
            continue
        # Else a header (key 12), ``(0a <len> <name>)? (12 <len> <value>)?``: its key renumbered too.
        part[key_at] = _SEQ_HEADER
        headers += 1
        name = 0
        if start < at and part[start] == _NAME:
            name, value_at = part[start + 1], start + 2
            if name > 0x7F:
                name, value_at = _varint(part, start + 1)
            start = value_at + name
        if start < at:  # the value
            value, value_at = part[start + 1], start + 2
            if value > 0x7F:
                value, value_at = _varint(part, start + 1)
            size += value
            start = value_at
        size += 2 + name
        if not name:
            op = bytes(part[start:at])
    if op is not None:
        if headers != 1:
            raise invalid("header name must not be empty (command records have exactly one header)")
        commands.append((i, op, bytes(part[body])))
    return bytes(part), size


def _varint(data: bytes | bytearray, pos: int) -> tuple[int, int]:
    """The varint at `pos` and the position after it."""
    byte = data[pos]
    if byte < 0x80:
        return byte, pos + 1
    value, shift = byte & 0x7F, 7
    while True:
        pos += 1
        byte = data[pos]
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos + 1
        shift += 7


def _check_commands(commands: list[tuple[int, bytes, bytes]]) -> None:
    """Fence and trim command records' bodies; 422 for any other command."""
    for _, op, body in commands:
        if op == b"fence":
            if len(body) > MAX_FENCING_TOKEN:
                raise invalid(f"fencing token must be at most 36 bytes, got {len(body)}")
            try:
                body.decode()
            except UnicodeDecodeError as exc:
                raise invalid("fencing token must be UTF-8") from exc
        elif op == b"trim":
            if len(body) != 8:
                raise invalid(
                    f"trim command body must be an 8-byte big-endian seq_num, got {len(body)} bytes"
                )
        else:
            raise invalid(f"unknown command record {op!r}")
