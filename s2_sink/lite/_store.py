"""Basins, streams and records: the semantics of the S2 data plane, in memory.

Everything here runs on the server's single event loop thread, so no locks. Appends are sequenced immediately
(so pipelined appends and ``match_seq_num`` see in-flight batches) but become *visible* to reads and
``check_tail`` only once durable; with no data directory that is at once. The durable log (``_durability``)
replays into the same calls.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from s2_sink.lite._configs import Json, apply_basin_config, apply_stream_config, default_basin_config
from s2_sink.lite._errors import (
    ApiError,
    conflict,
    fencing_token_mismatch,
    invalid,
    not_found,
    seq_num_mismatch,
)
from s2_sink.lite._wire import PlainProbe, RawList, pb, sequenced, sequenced_plain, varint

__all__ = ["Basin", "Batch", "ReadResult", "Store", "Stream", "now_ms", "rfc3339"]

ONE_MIB = 1024 * 1024
MAX_BATCH_RECORDS = 1000
MAX_FENCING_TOKEN = 36
_BASIN_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def now_ms() -> int:
    """Arrival time in milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


def rfc3339(ts: float) -> str:
    """RFC 3339 UTC timestamp, as BasinInfo/StreamInfo carry it."""
    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def validate_basin_name(name: str) -> None:
    """8-48 chars of ``[a-z0-9-]``, not starting or ending with a hyphen."""
    if not (8 <= len(name) <= 48 and _BASIN_RE.match(name)):
        raise invalid(
            f"basin name must be 8-48 characters of [a-z0-9-] not starting or ending with '-', got {name!r}"
        )


def validate_stream_name(name: str) -> None:
    """1-512 bytes of UTF-8 without NUL."""
    if not (1 <= len(name.encode()) <= 512) or "\x00" in name:
        raise invalid(f"stream name must be 1-512 bytes without NUL, got {name!r}")


@dataclass(slots=True)
class ParsedInput:
    """A validated ``AppendInput``: records plus what sequencing needs to know about them."""

    n: int
    #: Headers-and-body parts of ``SequencedRecord`` (None for a plain input).
    records: list[bytes] | None
    #: Plain input (every record body-only): the ``AppendInput`` encoding itself, whose records field
    #: ``RawList`` reads as the ``AppendRecord`` encodings (None otherwise).
    payload: bytes | None
    #: (record index, command op, body) for each command record.
    commands: list[tuple[int, bytes, bytes]]
    #: record index -> client timestamp, for records that carry one.
    client_ts: dict[int, int]
    match_seq_num: int | None
    fencing_token: str | None


def parse_input(data: bytes) -> ParsedInput:
    """Decode and validate an encoded ``AppendInput`` (400 ``bad_proto``, 422 ``invalid``)."""
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
    if probe.ByteSize() == len(data):
        if len(data) + 8 * n > ONE_MIB:  # cheap bound first; exact metering only near the limit
            metered = 8 * n + sum(len(r.body) for r in probe.records)
            if metered > ONE_MIB:
                raise invalid(f"a batch may hold at most 1 MiB of metered bytes, got {metered}")
        return ParsedInput(n, None, data, [], {}, msn, token)
    try:
        raw = RawList.FromString(data).items
        pb.AppendInput.FromString(data)  # full validation of the structure
    except Exception as exc:
        raise ApiError(400, "bad_proto", f"invalid AppendInput: {exc}") from exc
    tails: list[bytes] = []
    complex_idx: list[int] = []
    metered = 8 * n
    for rec in raw:
        # Body-only records become ``22 <len> <body>`` by renumbering one tag.
        ln = len(rec)
        if ln >= 2 and rec[0] == 0x1A:
            b1 = rec[1]
            if b1 < 0x80:
                if ln == 2 + b1:
                    tails.append(b"\x22" + rec[1:])
                    metered += b1
                    continue
            elif ln >= 3 and rec[2] < 0x80 and ln == 3 + ((b1 & 0x7F) | (rec[2] << 7)):
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
        rec = pb.AppendRecord.FromString(tails[i])
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
        metered += size - 8
        if rec.HasField("timestamp"):
            client_ts[i] = rec.timestamp
        tails[i] = pb.SequencedRecord(headers=hdrs, body=rec.body).SerializeToString()
    if metered > ONE_MIB:
        raise invalid(f"a batch may hold at most 1 MiB of metered bytes, got {metered}")
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
    return ParsedInput(n, tails, None, commands, client_ts, msn, token)


def _metered_of_tail(tail: bytes) -> int:
    """Metered size (8 + 2*headers + names + values + body) of a stored headers-and-body part."""
    n = len(tail)
    if n == 0:
        return 8
    if tail[0] == 0x22:
        b1 = tail[1]
        if b1 < 0x80 and n == 2 + b1:
            return 8 + b1
        if b1 >= 0x80 and n >= 3 and tail[2] < 0x80 and n == 3 + ((b1 & 0x7F) | (tail[2] << 7)):
            return 8 + n - 3
    rec = pb.SequencedRecord.FromString(tail)
    return 8 + len(rec.body) + sum(2 + len(h.name) + len(h.value) for h in rec.headers)


class Batch:
    """One appended batch, atomic: records ``[start, end)``.

    A plain batch (every record body-only, the common case) keeps just the ``AppendInput`` encoding it came
    in; the per-record ``AppendRecord`` encodings are cut out of it (in C) on the first read. Other batches
    keep headers-and-body parts of ``SequencedRecord`` per record.
    """

    __slots__ = ("_metered", "_records", "end", "last_ts", "payload", "plain", "start", "ts0", "ts_list")

    def __init__(
        self,
        start: int,
        end: int,
        *,
        records: list[bytes] | None,
        payload: bytes | None,
        ts0: int,
        ts_list: list[int] | None,
        last_ts: int,
    ) -> None:
        self.start = start
        self.end = end
        self._records = records
        #: The AppendInput encoding of a plain batch until its records are first read (the log writes it).
        self.payload = payload
        #: Records are ``AppendRecord`` encodings of body-only records.
        self.plain = records is None
        self.ts0 = ts0
        #: Per-record timestamps; None when every record got ``ts0``.
        self.ts_list = ts_list
        self.last_ts = last_ts
        self._metered: list[int] | None = None

    @property
    def records(self) -> list[bytes]:
        """Per-record encodings (see ``plain``)."""
        if self._records is None:
            assert self.payload is not None
            self._records = list(RawList.FromString(self.payload).items)
            self.payload = None
        return self._records

    def ts(self, i: int) -> int:
        """Timestamp of the i-th record of the batch."""
        return self.ts0 if self.ts_list is None else self.ts_list[i]

    def cumulative_metered(self) -> list[int]:
        """Running totals of the records' metered sizes, computed once on first use."""
        if self._metered is None:
            if self.plain:
                # ``1a <varint len> <body>``: a 1-byte varint up to 129 bytes, 2 bytes up to 16386, else 3.
                sizes = [
                    8 if n == 0 else n + 6 if n <= 129 else n + 5 if n <= 16386 else n + 4
                    for n in map(len, self.records)
                ]
            else:
                sizes = [_metered_of_tail(t) for t in self.records]
            self._metered = list(itertools.accumulate(sizes))
        return self._metered


@dataclass(slots=True)
class ReadResult:
    """Records gathered by ``Stream.collect``."""

    records: list[bytes]
    next_seq: int
    count: int
    nbytes: int
    #: The ``until`` bound was met: no later record can qualify.
    until_reached: bool


@dataclass(eq=False)
class Stream:
    """A stream's state: sequencing tail, visible (durable) tail, fencing token, trim point and batches."""

    basin: str
    name: str
    config: Json
    created_at: float
    next_seq: int = 0
    last_ts: int = 0
    visible_seq: int = 0
    visible_ts: int = 0
    fencing_token: str = ""
    trim_point: int = 0
    #: The ``s2-request-token`` of the create call, so a retried create is answered as a success.
    request_token: str | None = None
    deleted: bool = False
    batches: list[Batch] = field(default_factory=list)
    starts: list[int] = field(default_factory=list)
    last_ts_list: list[int] = field(default_factory=list)
    _changed: asyncio.Event | None = None

    def info(self) -> Json:
        """StreamInfo JSON."""
        return {"name": self.name, "created_at": rfc3339(self.created_at), "deleted_at": None, "cipher": None}

    def tail(self) -> tuple[int, int]:
        """The visible tail: next seq_num and the last record's timestamp."""
        return self.visible_seq, self.visible_ts

    def changed(self) -> asyncio.Event:
        """An event set the next time the visible tail moves (or the stream is deleted)."""
        if self._changed is None:
            self._changed = asyncio.Event()
        return self._changed

    def notify(self) -> None:
        """Wake readers waiting on ``changed``."""
        ev = self._changed
        if ev is not None:
            self._changed = None
            ev.set()

    def make_visible(self, end: int, last_ts: int) -> None:
        """Expose records up to ``end`` to readers (called once they are durable)."""
        if end > self.visible_seq:
            self.visible_seq = end
            self.visible_ts = max(self.visible_ts, last_ts)
            self.notify()

    # -- appends ---------------------------------------------------------------------------------------------

    def sequence(self, data: bytes, arrival: int) -> Batch:
        """Validate and sequence one encoded ``AppendInput``; returns the (not yet visible) batch.

        Raises ApiError 400/412/422. Checks happen before any state changes, so a failed append has no effect.
        """
        p = parse_input(data)
        n = p.n
        ts_cfg = self.config["timestamping"]
        mode = ts_cfg["mode"]
        uncapped = bool(ts_cfg.get("uncapped"))
        client_ts = p.client_ts
        commands = p.commands
        ts_list: list[int] | None = None
        if mode == "client-require" and len(client_ts) != n:
            raise invalid("timestamping mode client-require needs a timestamp on every record")
        # Append conditions are checked against the state before this batch.
        if p.fencing_token is not None and p.fencing_token != self.fencing_token:
            raise fencing_token_mismatch(self.fencing_token)
        if p.match_seq_num is not None and p.match_seq_num != self.next_seq:
            raise seq_num_mismatch(self.next_seq)
        prev = self.last_ts
        if not client_ts or mode == "arrival":
            ts0 = max(arrival, prev)
            last_ts = ts0
        else:
            ts_list = []
            cur = prev
            for i in range(n):
                t = client_ts.get(i, arrival)
                if not uncapped and t > arrival:
                    t = arrival
                cur = max(cur, t)
                ts_list.append(cur)
            ts0 = ts_list[0]
            last_ts = cur
        start = self.next_seq
        batch = Batch(
            start, start + n, records=p.records, payload=p.payload, ts0=ts0, ts_list=ts_list, last_ts=last_ts
        )
        for i, op, body in commands:
            if op == b"fence":
                self.fencing_token = body.decode()
            else:
                desired = int.from_bytes(body, "big")
                self.trim_point = max(self.trim_point, min(desired, start + i + 1))
        self.add_batch(batch)
        return batch

    def add_batch(self, batch: Batch) -> None:
        """Record a sequenced batch (also used by log replay)."""
        self.batches.append(batch)
        self.starts.append(batch.start)
        self.last_ts_list.append(batch.last_ts)
        self.next_seq = batch.end
        self.last_ts = batch.last_ts
        self._drop_trimmed()

    def _drop_trimmed(self) -> None:
        k = 0
        while k < len(self.batches) - 1 and self.batches[k].end <= self.trim_point:
            k += 1
        if k:
            del self.batches[:k], self.starts[:k], self.last_ts_list[:k]

    # -- reads -----------------------------------------------------------------------------------------------

    def seq_for_timestamp(self, ts: int) -> int:
        """The first visible seq_num whose timestamp is >= ``ts`` (the visible tail if none)."""
        k = bisect.bisect_left(self.last_ts_list, ts)
        while k < len(self.batches):
            b = self.batches[k]
            if b.start >= self.visible_seq:
                break
            for i in range(b.end - b.start):
                if b.ts(i) >= ts:
                    return max(b.start + i, self.trim_point)
            k += 1
        return self.visible_seq

    def first_seq(self) -> int:
        """The first readable seq_num (after trimming)."""
        if self.batches:
            return max(self.trim_point, self.batches[0].start)
        return self.next_seq

    def collect(self, start: int, max_count: int, max_bytes: int, until: int | None) -> ReadResult:
        """Visible records from ``start``: at most ``max_count`` records and ``max_bytes`` metered bytes."""
        start = max(start, self.first_seq())
        out: list[bytes] = []
        nbytes = 0
        seq = start
        limit = self.visible_seq
        until_reached = False
        k = bisect.bisect_right(self.starts, seq) - 1
        k = max(k, 0)
        batches = self.batches
        while seq < limit and len(out) < max_count and k < len(batches):
            b = batches[k]
            i = seq - b.start
            if i < 0:
                i = 0
                seq = b.start
            stop = min(b.end, limit, seq + (max_count - len(out)))
            j = stop - b.start
            if until is not None and b.last_ts >= until:
                # Cut at the first record at or past ``until``.
                jj = i
                while jj < j and b.ts(jj) < until:
                    jj += 1
                if jj < j:
                    j = jj
                    until_reached = True
            if max_bytes < (1 << 62):
                cum = b.cumulative_metered()
                base = cum[i - 1] if i else 0
                if cum[j - 1] - base + nbytes > max_bytes:
                    # The byte budget runs out inside this batch: stop after the last record that fits.
                    j = bisect.bisect_right(cum, max_bytes - nbytes + base, i, j)
                    max_count = len(out) + (j - i)
                nbytes += (cum[j - 1] - base) if j > i else 0
            recs = b.records
            if b.plain and b.ts_list is None:
                # The common case, inlined: ``08 <seq> 10 <ts> 22`` + the record's bytes after its ``1a`` tag.
                mid = b"\x10" + varint(b.ts0) + b"\x22"
                s0 = b.start
                out.extend(
                    [
                        b"\x08" + varint(s0 + x) + mid + recs[x][1:]
                        if recs[x]
                        else sequenced_plain(s0 + x, b.ts0, b"")
                        for x in range(i, j)
                    ]
                )
            else:
                enc = sequenced_plain if b.plain else sequenced
                out.extend([enc(b.start + x, b.ts(x), recs[x]) for x in range(i, j)])
            seq = b.start + j
            if until_reached or j < (stop - b.start):
                break
            k += 1
        return ReadResult(out, seq, len(out), nbytes, until_reached)


@dataclass(eq=False)
class Basin:
    """A basin: configuration and streams."""

    name: str
    config: Json
    created_at: float
    request_token: str | None = None
    streams: dict[str, Stream] = field(default_factory=dict)

    def info(self) -> Json:
        """BasinInfo JSON."""
        return {
            "name": self.name,
            "location": None,
            "created_at": rfc3339(self.created_at),
            "deleted_at": None,
            "state": "active",
        }


class Store:
    """All basins. Mutations of metadata are reported to ``on_meta`` (the durable log) as JSON documents."""

    def __init__(self) -> None:
        self.basins: dict[str, Basin] = {}
        self.on_meta: Callable[[Json], None] | None = None

    def _log(self, doc: Json) -> None:
        if self.on_meta is not None:
            self.on_meta(doc)

    # -- basins ----------------------------------------------------------------------------------------------

    def basin(self, name: str) -> Basin:
        """The basin, or 404 ``basin_not_found``."""
        b = self.basins.get(name)
        if b is None:
            raise not_found("basin_not_found", f"basin {name!r} not found")
        return b

    def put_basin(
        self, name: str, config: Json, created_at: float, request_token: str | None = None
    ) -> Basin:
        """Create (or replace on replay) a basin with a complete config."""
        b = self.basins.get(name)
        if b is None:
            b = Basin(name, config, created_at, request_token)
            self.basins[name] = b
        else:
            b.config = config
        self._log({"op": "basin", "name": name, "config": config, "created_at": created_at})
        return b

    def create_basin(self, name: str, patch: Any, request_token: str | None) -> tuple[Basin, bool]:
        """
        POST semantics: (basin, created). A replayed request token is a no-op; otherwise 409 if it exists."""
        validate_basin_name(name)
        existing = self.basins.get(name)
        if existing is not None:
            if request_token is not None and existing.request_token == request_token:
                return existing, False
            raise conflict("resource_already_exists", f"basin {name!r} already exists")
        config = apply_basin_config(default_basin_config(), patch)
        return self.put_basin(name, config, time.time(), request_token), True

    def ensure_basin(self, name: str, patch: Any) -> tuple[Basin, str]:
        """PUT semantics: (basin, provision result ``created|updated|noop``)."""
        validate_basin_name(name)
        existing = self.basins.get(name)
        if existing is None:
            config = apply_basin_config(default_basin_config(), patch)
            return self.put_basin(name, config, time.time()), "created"
        config = apply_basin_config(existing.config, patch)
        if config == existing.config:
            return existing, "noop"
        return self.put_basin(name, config, existing.created_at), "updated"

    def reconfigure_basin(self, name: str, patch: Any) -> Basin:
        """PATCH semantics."""
        b = self.basin(name)
        return self.put_basin(name, apply_basin_config(b.config, patch), b.created_at)

    def delete_basin(self, name: str) -> None:
        """Delete a basin and its streams."""
        b = self.basin(name)
        del self.basins[name]
        for s in b.streams.values():
            s.deleted = True
            s.notify()
        self._log({"op": "basin_del", "name": name})

    # -- streams ---------------------------------------------------------------------------------------------

    def stream(
        self, basin: str, name: str, *, auto_create: str | None = None, header_config: Any = None
    ) -> Stream:
        """The stream, auto-created when the basin's ``create_stream_on_<auto_create>`` is set; else 404."""
        b = self.basin(basin)
        s = b.streams.get(name)
        if s is not None:
            return s
        if auto_create is not None and b.config.get(f"create_stream_on_{auto_create}"):
            validate_stream_name(name)
            config = apply_stream_config(b.config["default_stream_config"], header_config)
            return self.put_stream(basin, name, config, time.time())
        raise not_found("stream_not_found", f"stream {name!r} not found in basin {basin!r}")

    def put_stream(self, basin: str, name: str, config: Json, created_at: float) -> Stream:
        """Create (or reconfigure) a stream with a complete config."""
        b = self.basin(basin)
        s = b.streams.get(name)
        if s is None:
            s = Stream(basin, name, config, created_at)
            b.streams[name] = s
        else:
            s.config = config
        self._log({"op": "stream", "basin": basin, "name": name, "config": config, "created_at": created_at})
        return s

    def create_stream(self, basin: str, name: str, patch: Any, request_token: str | None = None) -> Stream:
        """POST semantics: 409 if it exists, unless this is a retry carrying the same request token."""
        b = self.basin(basin)
        validate_stream_name(name)
        existing = b.streams.get(name)
        if existing is not None:
            if request_token is not None and existing.request_token == request_token:
                return existing
            raise conflict("resource_already_exists", f"stream {name!r} already exists")
        config = apply_stream_config(b.config["default_stream_config"], patch)
        s = self.put_stream(basin, name, config, time.time())
        s.request_token = request_token
        return s

    def ensure_stream(self, basin: str, name: str, patch: Any) -> tuple[Stream, str]:
        """PUT semantics: (stream, ``created|updated|noop``)."""
        b = self.basin(basin)
        validate_stream_name(name)
        s = b.streams.get(name)
        if s is None:
            config = apply_stream_config(b.config["default_stream_config"], patch)
            return self.put_stream(basin, name, config, time.time()), "created"
        config = apply_stream_config(s.config, patch)
        if config == s.config:
            return s, "noop"
        return self.put_stream(basin, name, config, s.created_at), "updated"

    def reconfigure_stream(self, basin: str, name: str, patch: Any) -> Stream:
        """PATCH semantics."""
        s = self.stream(basin, name)
        return self.put_stream(basin, name, apply_stream_config(s.config, patch), s.created_at)

    def delete_stream(self, basin: str, name: str) -> None:
        """Delete a stream; readers following it are woken and see it gone."""
        s = self.stream(basin, name)
        del self.basin(basin).streams[name]
        s.deleted = True
        s.notify()
        self._log({"op": "stream_del", "basin": basin, "name": name})

    def iter_streams(self) -> Iterator[Stream]:
        """Every stream of every basin."""
        for b in self.basins.values():
            yield from b.streams.values()
