"""The append-only log behind ``--data-dir``: one file, fsync'd before any ack, replayed on start.

Entry layout: ``[len:u32][crc32:u32][kind:u8][payload]`` (big-endian; ``len`` counts kind + payload). Kinds:
metadata (a JSON document from the store) and append (one sequenced batch plus the stream's fencing token and
trim point after it). An append holds, after its header, the per-record timestamps if its flag 1 says so, the
running totals of the records' metered sizes (``u64`` each) and the records as reads send them (the records
field of a ``ReadBatch``). Append entries of the earlier layout (kind 2, which kept a batch in
several forms) are refused with the fix rather than taken for a torn tail. Entries are written in sequencing
order, so a batch that did not reach the disk can only be followed by others that did not
either; replay stops at the first torn or corrupt entry and truncates the file there.

Group commit: entries are buffered as they are sequenced; one background thread writes and fsyncs whatever has
accumulated, then runs the callbacks (acks) registered before that write began, and starts over. Pipelined
appends therefore share fsyncs instead of paying one each.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import zlib
from array import array
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson

from s2_sink.lite._batch import Batch
from s2_sink.lite._configs import Json
from s2_sink.lite._store import Store
from s2_sink.lite._stream import Stream

__all__ = ["DurableLog", "encode_append", "encode_meta", "replay"]

log = logging.getLogger(__name__)

LOG_NAME = "lite.log"
_KIND_META = 1
#: Append entries as an earlier lite server wrote them (a batch in one of several forms): not read.
_KIND_APPEND_BEFORE = 2
_KIND_APPEND = 3
_HEAD = struct.Struct(">II")
_APPEND_HEAD = struct.Struct(">HHQQQIBQ")
_TIMESTAMPS = 1


def _entry(kind: int, payload: bytes) -> bytes:
    body = bytes((kind,)) + payload
    return _HEAD.pack(len(body), zlib.crc32(body)) + body


def encode_meta(doc: Json) -> bytes:
    """A metadata entry."""
    return _entry(_KIND_META, orjson.dumps(doc))


def encode_append(stream: Stream, batch: Batch) -> bytes:
    """An append entry: the batch and the stream's fencing token and trim point after it."""
    basin = stream.basin.encode()
    name = stream.name.encode()
    token = stream.fencing_token.encode()
    n = batch.end - batch.start
    flags = _TIMESTAMPS if batch.ts_list is not None else 0
    head = _APPEND_HEAD.pack(
        len(basin), len(name), batch.start, batch.ts0, batch.last_ts, n, flags, stream.trim_point
    )
    parts = [head, basin, name, bytes((len(token),)), token]
    if batch.ts_list is not None:
        ts = array("Q", batch.ts_list)
        if ts.itemsize != 8:  # pragma: no cover - every supported platform has 8-byte "Q"
            raise RuntimeError("array('Q') is not 64-bit here")
        parts.append(ts.tobytes())
    parts += (batch.metered.tobytes(), batch.data)
    return _entry(_KIND_APPEND, b"".join(parts))


def _apply_append(store: Store, payload: memoryview) -> None:
    blen, slen, start, ts0, last_ts, n, flags, trim = _APPEND_HEAD.unpack_from(payload, 0)
    pos = _APPEND_HEAD.size
    basin = bytes(payload[pos : pos + blen]).decode()
    pos += blen
    name = bytes(payload[pos : pos + slen]).decode()
    pos += slen
    tlen = payload[pos]
    token = bytes(payload[pos + 1 : pos + 1 + tlen]).decode()
    pos += 1 + tlen
    ts_list: list[int] | None = None
    if flags & _TIMESTAMPS:
        stamps = array("Q")
        stamps.frombytes(payload[pos : pos + 8 * n])
        ts_list = stamps.tolist()
        pos += 8 * n
    metered = array("q")
    metered.frombytes(payload[pos : pos + 8 * n])
    pos += 8 * n
    data = bytes(payload[pos:])
    b = store.basins.get(basin)
    s = b.streams.get(name) if b is not None else None
    if s is None:
        log.warning("log replay: append to missing stream %s/%s skipped", basin, name)
        return
    s.fencing_token = token
    s.trim_point = trim
    s.add_batch(
        Batch(
            start,
            data,
            metered,
            ts0=ts0,
            ts_list=ts_list,
            last_ts=last_ts,
            # Arrival times are not logged: retention counts replayed records from the restart.
            arrival=store.clock.now_ms(),
        )
    )
    s.make_visible(start + n, last_ts)


def _apply_meta(store: Store, doc: Json) -> None:
    op = doc["op"]
    if op == "basin":
        store.put_basin(doc["name"], doc["config"], doc["created_at"])
    elif op == "basin_del":
        store.basins.pop(doc["name"], None)
    elif op == "stream":
        if doc["basin"] in store.basins:
            store.put_stream(doc["basin"], doc["name"], doc["config"], doc["created_at"], doc.get("cipher"))
    elif op == "stream_del":
        b = store.basins.get(doc["basin"])
        if b is not None:
            b.streams.pop(doc["name"], None)


def replay(path: Path, store: Store) -> int:
    """Load every intact entry of the log into ``store``; truncate a torn tail. Returns the entry count."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    view = memoryview(data)
    pos = 0
    count = 0
    saved = store.on_meta
    store.on_meta = None  # replaying must not log again
    try:
        while pos + _HEAD.size <= len(data):
            length, crc = _HEAD.unpack_from(data, pos)
            body = view[pos + _HEAD.size : pos + _HEAD.size + length]
            if length == 0 or len(body) < length or zlib.crc32(body) != crc:
                break
            kind = body[0]
            if kind == _KIND_META:
                _apply_meta(store, orjson.loads(bytes(body[1:])))
            elif kind == _KIND_APPEND:
                _apply_append(store, body[1:])
            elif kind == _KIND_APPEND_BEFORE:
                raise ValueError(
                    f"{path} was written by an earlier lite server, whose append entries this one does not"
                    " read; start it on a new --data-dir (the lite server's data is for local runs and tests)"
                )
            else:
                break
            pos += _HEAD.size + length
            count += 1
    finally:
        store.on_meta = saved
    if pos < len(data):
        log.warning("log replay: dropping %d bytes of torn or corrupt tail from %s", len(data) - pos, path)
        with path.open("r+b") as f:
            f.truncate(pos)
            f.flush()
            os.fsync(f.fileno())
    return count


class DurableLog:
    """Buffered writer with group commit. Call from the event loop thread only."""

    def __init__(self, directory: Path, loop: asyncio.AbstractEventLoop) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / LOG_NAME
        self._loop = loop
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="s2-lite-fsync")
        self._buf: list[bytes] = []
        self._waiters: list[Callable[[], None]] = []
        self._busy = False
        self._closed = False
        self.fsyncs = 0
        # Entries written so far, and how many of them are known to be on disk.
        self._written = 0
        self._synced = 0
        _fsync_dir(directory)

    def write(self, entry: bytes) -> None:
        """Queue an entry; it is durable once a later ``commit`` callback runs."""
        self._buf.append(entry)
        self._written += 1

    @property
    def clean(self) -> bool:
        """Every entry written so far is on disk."""
        return self._synced == self._written

    def commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop once everything written so far is on disk."""
        self._waiters.append(callback)
        self._kick()

    def barrier(self) -> asyncio.Future[None]:
        """A future resolved once everything written so far is on disk."""
        fut: asyncio.Future[None] = self._loop.create_future()

        def done() -> None:
            if not fut.done():
                fut.set_result(None)

        self.commit(done)
        return fut

    def _kick(self) -> None:
        if self._busy or self._closed or not self._waiters:
            return
        self._busy = True
        data = b"".join(self._buf)
        waiters = self._waiters
        upto = self._written
        self._buf = []
        self._waiters = []
        fut = self._loop.run_in_executor(self._pool, self._write_sync, data)
        fut.add_done_callback(lambda f: self._done(f, waiters, upto))

    def _write_sync(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]
        os.fsync(self._fd)

    def _done(self, fut: asyncio.Future[None], waiters: list[Callable[[], None]], upto: int) -> None:
        self._busy = False
        exc = fut.exception() if not fut.cancelled() else None
        if exc is not None:
            # Without a working disk no ack may be sent: leave the waiters unresolved and stop.
            log.critical("durable log write failed; no further appends will be acknowledged: %s", exc)
            self._closed = True
            return
        self.fsyncs += 1
        self._synced = upto
        for cb in waiters:
            cb()
        self._kick()

    def close(self) -> None:
        """Flush synchronously and close the file."""
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=True)
        if self._buf:
            self._write_sync(b"".join(self._buf))
            self._buf = []
        os.close(self._fd)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
