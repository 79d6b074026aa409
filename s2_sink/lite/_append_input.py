"""Decoding and validating one ``AppendInput``: record limits, metered sizes and command records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]

from s2_sink.lite._errors import ApiError, invalid
from s2_sink.lite._mostly_plain import Exceptions, find_exceptions
from s2_sink.lite._record_scan import Ints, RecordScan, scan_records
from s2_sink.lite._wire import PlainProbe, RawList, pb, stored_part, varint

__all__ = ["MAX_BATCH_RECORDS", "ONE_MIB", "ParsedInput", "parse_input"]

ONE_MIB = 1024 * 1024
MAX_BATCH_RECORDS = 1000
MAX_FENCING_TOKEN = 36
#: Bytes of headers and timestamps per record, on average, up to which the mostly plain form is sought...
_ASIDE_BYTES_PER_RECORD = 4
#: ...or in all, whatever the batch size: an exactly-once chunk tag (at most 128 bytes) fits in any batch.
_ASIDE_BYTES_ANY_BATCH = 128


@dataclass(slots=True)
class ParsedInput:
    """A validated ``AppendInput``: records plus what sequencing needs to know about them."""

    n: int
    #: Headers-and-body parts of ``SequencedRecord`` (None when the input is kept as ``payload``).
    records: list[bytes] | None
    #: Plain input (every record body-only but those in ``exceptions``): the ``AppendInput`` encoding
    #: itself, whose records field ``RawList`` reads as the ``AppendRecord`` encodings. Scanned input (see
    #: ``plain``): a ``RawList`` encoding of the headers-and-body parts. None otherwise.
    payload: bytes | None
    #: Plain input: record index -> headers-and-body part, for its records that are not body-only.
    exceptions: dict[int, bytes]
    #: (record index, command op, body) for each command record.
    commands: list[tuple[int, bytes, bytes]]
    #: record index -> client timestamp, for records that carry one.
    client_ts: dict[int, int]
    match_seq_num: int | None
    fencing_token: str | None
    #: A plain input (``payload`` holds ``AppendRecord`` encodings of body-only records); False for every
    #: other form, whose records are headers-and-body parts.
    plain: bool = False
    #: Each record's metered size, where the bulk scan has counted them (None otherwise).
    metered: Ints | None = None
    #: The lengths of the items of ``payload``'s records field, where the append measured them (None
    #: otherwise): the first read then need not parse the payload again to find its records.
    lengths: npt.NDArray[np.int32] | None = None

    def tails(self) -> list[bytes]:
        """Every record's headers-and-body part, whichever form the input is kept in."""
        if self.records is not None:
            return self.records
        assert self.payload is not None
        items = RawList.FromString(self.payload).items
        if not self.plain:
            return list(items)
        tails = [b"\x22" + rec[1:] if rec else b"" for rec in items]
        for i, tail in self.exceptions.items():
            tails[i] = tail
        return tails


def parse_input(data: bytes) -> ParsedInput:
    """Decode and validate an encoded ``AppendInput`` (400 ``bad_proto``, 422 ``invalid``)."""
    # Headers on the first records (an upsert batch has them on every record): the plain form would not pay,
    # so the bulk scan goes first; the usual order follows (and reports any error) if it does not read it.
    scanned_first = _headers_lead(data)
    if scanned_first and (parsed := _bulk(data)) is not None:
        return parsed
    try:
        probe = PlainProbe.FromString(data)
    except Exception as exc:  # upb raises DecodeError; anything else is malformed input too
        raise ApiError(400, "bad_proto", f"invalid AppendInput: {exc}") from exc
    n = len(probe.records)
    if not 1 <= n <= MAX_BATCH_RECORDS:
        raise invalid(f"a batch must have 1 to 1000 records, got {n}")
    msn = probe.match_seq_num if probe.HasField("match_seq_num") else None
    token = probe.fencing_token if probe.HasField("fencing_token") else None
    # PlainProbe knows only record bodies: if dropping what it does not know changes nothing, every record is
    # body-only, and the whole batch is validated without touching records one by one in Python.
    probe.DiscardUnknownFields()
    surplus = len(data) - probe.ByteSize()
    if surplus == 0:
        _check_plain_size(data, n, probe, 0)
        return ParsedInput(n, None, data, {}, [], {}, msn, token, plain=True)
    # A few records with headers or timestamps: the plain form with them aside. Where headers weigh more (an
    # upsert batch has ~25 bytes on every record), most records have some, and the search would not pay.
    worth = max(_ASIDE_BYTES_PER_RECORD * n, _ASIDE_BYTES_ANY_BATCH)
    if surplus <= worth and (few := find_exceptions(data, probe, surplus)) is not None:
        return _mostly_plain(data, n, probe, few, msn=msn, token=token)
    if not scanned_first and (parsed := _bulk(data)) is not None:
        return parsed
    try:
        pb.AppendInput.FromString(data)  # full validation of the structure
        raw = RawList.FromString(data).items
    except Exception as exc:
        raise ApiError(400, "bad_proto", f"invalid AppendInput: {exc}") from exc
    return _record_by_record(raw, n, msn, token)


def _headers_lead(data: bytes) -> bool:
    """The input's first two records start with a header (in the canonical layout; False if unsure)."""
    pos = 0
    for _ in range(2):
        if len(data) < pos + 3 or data[pos] != 0x0A:
            return False
        length, pos = _varint(data, pos + 1)
        if pos >= len(data) or data[pos] != 0x12:
            return False
        pos += length
    return True


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at `pos` (at most 5 bytes read) and the position after it."""
    value = 0
    for k in range(5):
        if pos + k >= len(data):
            break
        byte = data[pos + k]
        value |= (byte & 0x7F) << (7 * k)
        if byte < 0x80:
            return value, pos + k + 1
    return 0, len(data)


def _bulk(data: bytes) -> ParsedInput | None:
    """The input read by the bulk scan (`scan_records`), or None if it is not in the layout the scan reads
    (records first, then match_seq_num and fencing_token as a serializer writes them) or breaks a limit on
    the number of records: the usual order decides those."""
    try:
        raw = RawList.FromString(data).items
    except DecodeError:
        return None
    n = len(raw)
    if not 1 <= n <= MAX_BATCH_RECORDS:
        return None
    lengths = np.fromiter(map(len, raw), dtype=np.int64, count=n)
    # The scan checks every field it reads (keys, lengths, layout), so a canonical input needs no full parse.
    scan = scan_records(data, lengths, None)
    if scan is None:
        return None
    # What follows the records: only the input's own fields, each once.
    try:
        rest = PlainProbe.FromString(data[len(scan.encoded) :])
    except DecodeError:
        return None
    msn = rest.match_seq_num if rest.HasField("match_seq_num") else None
    token = rest.fencing_token if rest.HasField("fencing_token") else None
    if rest.records or len(scan.encoded) + _trailer_size(msn, token) != len(data):
        return None
    return _scanned(scan, n, msn, token, lengths)


def _check_plain_size(data: bytes, n: int, probe: Any, header_bytes: int) -> None:
    """The 1 MiB batch limit for a plain input (`header_bytes`: metered headers of its exceptions)."""
    # The encoding outweighs the metered size but for the 8 bytes per record: a cheap bound first.
    if len(data) + 8 * n > ONE_MIB:
        metered = 8 * n + sum(len(r.body) for r in probe.records) + header_bytes
        if metered > ONE_MIB:
            raise invalid(f"a batch may hold at most 1 MiB of metered bytes, got {metered}")


def _mostly_plain(
    data: bytes, n: int, probe: Any, few: Exceptions, *, msn: int | None, token: str | None
) -> ParsedInput:
    """A plain input but for a few records (`find_exceptions`): those are decoded one by one."""
    exceptions: dict[int, bytes] = {}
    commands: list[tuple[int, bytes, bytes]] = []
    client_ts: dict[int, int] = {}
    for i, rec in few.records:
        exceptions[i], _ = _decoded(i, rec, commands, client_ts)
    _check_plain_size(data, n, probe, few.header_bytes)
    _check_commands(commands)
    return ParsedInput(n, None, data, exceptions, commands, client_ts, msn, token, plain=True)


def _decoded(
    i: int, rec: Any, commands: list[tuple[int, bytes, bytes]], client_ts: dict[int, int]
) -> tuple[bytes, int]:
    """Record `i` (an ``AppendRecord``): its headers-and-body part and metered size; notes its command and
    timestamp. Raises 422 for an empty header name outside a command record or an oversized record."""
    hdrs = rec.headers
    size = 8 + len(rec.body)
    for h in hdrs:
        size += 2 + len(h.name) + len(h.value)
        if not h.name:
            if len(hdrs) != 1:
                raise invalid("header name must not be empty (command records have exactly one header)")
            commands.append((i, h.value, rec.body))
    if size > ONE_MIB:
        raise invalid(f"record {i} is {size} metered bytes, more than 1 MiB")
    if rec.HasField("timestamp"):
        client_ts[i] = rec.timestamp
        rec.ClearField("timestamp")
    return stored_part(rec), size


def _scanned(scan: RecordScan, n: int, msn: int | None, token: str | None, lengths: Ints) -> ParsedInput:
    """A canonical input without command records, read in bulk (`scan_records`) with records of `lengths`
    bytes: kept as the one buffer the scan renumbered (its items as long as the input's records), unless
    client timestamps sit between its records' keys and their stored parts."""
    over = scan.complex & (scan.metered > ONE_MIB)
    if over.any():
        i = int(np.argmax(over))
        raise invalid(f"record {i} is {int(scan.metered[i])} metered bytes, more than 1 MiB")
    metered = int(scan.metered.sum())
    if metered > ONE_MIB:
        raise invalid(f"a batch may hold at most 1 MiB of metered bytes, got {metered}")
    if scan.client_ts:
        return ParsedInput(n, scan.tails(), None, {}, [], scan.client_ts, msn, token)
    return ParsedInput(
        n, None, scan.encoded, {}, [], {}, msn, token, metered=scan.metered, lengths=lengths.astype(np.int32)
    )


def _trailer_size(msn: int | None, token: str | None) -> int:
    """Bytes of the canonical match_seq_num and fencing_token fields."""
    size = 0 if msn is None else 1 + len(varint(msn))
    if token is not None:
        encoded = len(token.encode())
        size += 1 + len(varint(encoded)) + encoded
    return size


def _record_by_record(raw: list[bytes], n: int, msn: int | None, token: str | None) -> ParsedInput:
    """Any other input (command records, a non-canonical layout): decoded one record at a time."""
    tails: list[bytes] = []
    complex_idx: list[int] = []
    metered = 8 * n
    for rec in raw:
        # Body-only records become ``22 <len> <body>`` by renumbering one tag (when written as a serializer
        # writes them: an empty body written out or an over-long length is decoded, to be stored canonical).
        ln = len(rec)
        if ln >= 2 and rec[0] == 0x1A:
            b1 = rec[1]
            if b1 < 0x80:
                if ln == 2 + b1 and b1:
                    tails.append(b"\x22" + rec[1:])
                    metered += b1
                    continue
            elif ln >= 3 and 0 < rec[2] < 0x80 and ln == 3 + ((b1 & 0x7F) | (rec[2] << 7)):
                tails.append(b"\x22" + rec[1:])
                metered += ln - 3
                continue
        elif ln == 0:
            tails.append(b"")
            continue
        complex_idx.append(len(tails))
        tails.append(rec)
    commands: list[tuple[int, bytes, bytes]] = []
    client_ts: dict[int, int] = {}
    for i in complex_idx:
        tails[i], size = _decoded(i, pb.AppendRecord.FromString(tails[i]), commands, client_ts)
        metered += size - 8
    if metered > ONE_MIB:
        raise invalid(f"a batch may hold at most 1 MiB of metered bytes, got {metered}")
    _check_commands(commands)
    return ParsedInput(n, tails, None, {}, commands, client_ts, msn, token)


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
