"""Read-back: the fingerprints of what an exactly-once writer already put into a stream range, found by the
chunks' ``@s2sink`` tags and record counts (S2 appends batches contiguously); and `read_span`, the retried
paging loop under it that the zombie check and the CLI read through too.

Retries and replays subtract the multiset of fingerprints already in the stream: a canonical hash of what a
reader sees of a record. Left out: the timestamp (S2 may raise or cap it) and the headers saying where a
record was written from, which differ between a run and its replay (the ``@s2sink`` tag, a dead letter's
``s2sink-partition``)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from s2_sdk import (
    ReadLimit,
    ReadUnwrittenError,
    S2ClientError,
    S2ServerError,
    S2Stream,
    SeqNum,
    SequencedRecord,
)

from s2_sink._exactly_once.tags import TAG_HEADER, ChunkTag, find_tag
from s2_sink._transport.retry import DEFAULT_PATIENCE, Patience, Retrying, patiently
from s2_sink.encoders._frame import DLQ_ERROR, DLQ_PARTITION

__all__ = ["Fingerprints", "ReadBack", "fingerprint", "read_back", "read_span"]

_PAGE: Final = 1000
Fingerprints = Counter[bytes]  # a multiset
_TAG_ONLY: Final = frozenset((TAG_HEADER,))
_DEAD_LETTER_PLACEMENT: Final = frozenset((TAG_HEADER, DLQ_PARTITION))


def fingerprint(stream: str, headers: Iterable[tuple[bytes, bytes]] | None, body: bytes) -> bytes:
    """16-byte BLAKE2b of (stream, headers without the placement headers, body), each length-prefixed so
    field boundaries cannot be forged by content."""
    given = list(headers or ())
    # s2sink-partition is placement only on a dead letter (it has s2sink-error); elsewhere it is user content.
    placement = _DEAD_LETTER_PLACEMENT if any(n == DLQ_ERROR for n, _ in given) else _TAG_ONLY
    kept = [(n, v) for n, v in given if n not in placement]
    h = hashlib.blake2b(digest_size=16)

    def frame(data: bytes) -> None:
        h.update(len(data).to_bytes(4, "big"))
        h.update(data)

    frame(stream.encode())
    h.update(len(kept).to_bytes(4, "big"))
    for name, value in kept:
        frame(name)
        frame(value)
    frame(body)
    return h.digest()


@dataclass(slots=True)
class ReadBack:
    """The matching chunks found in ``[start, end)`` of a stream."""

    stream: str
    start: int
    end: int
    fingerprints: Fingerprints = field(default_factory=Counter)
    chunks: list[ChunkTag] = field(default_factory=list)
    elsewhere: Fingerprints = field(default_factory=Counter)  # of chunks matching ``elsewhere=``
    not_owned: int = 0  # records of matching chunks another task owns


async def read_back(
    stream: S2Stream,
    *,
    writer: str,
    start: int,
    match: Callable[[ChunkTag], bool],
    elsewhere: Callable[[ChunkTag], bool] | None = None,
    end: int | None = None,
    owns: Callable[[list[tuple[bytes, bytes]], bytes], bool] | None = None,
    patience: Patience = DEFAULT_PATIENCE,
) -> ReadBack:
    """The fingerprints of `writer`'s chunks in ``[start, end)`` matching `match` (of their records `owns`
    accepts), and separately of those matching `elsewhere`. `end` defaults to the tail: call it after a
    fence, so nothing older can still land past it."""
    name = stream.name
    if end is None:
        end = (await patiently(patience, f"checking the tail of {name!r}", stream.check_tail)).seq_num
    out = ReadBack(name, start, end)
    pos = start
    remaining = 0  # records left in the current chunk (including ones not yet read)
    into: Fingerprints | None = None  # where the current chunk's fingerprints go, if anywhere
    async for rec in read_span(stream, start, end, patience=patience):
        if rec.seq_num > pos and remaining:
            # Records before rec were trimmed away mid-chunk: the chunk is incomplete; drop the rest.
            remaining, into = 0, None
        pos = rec.seq_num + 1
        if remaining == 0:
            tag = find_tag(rec.headers)
            if tag is None or tag.writer != writer:
                continue
            remaining = tag.count
            into = None
            if match(tag):
                into = out.fingerprints
                out.chunks.append(tag)
            elif elsewhere is not None and elsewhere(tag):
                into = out.elsewhere
        remaining -= 1
        if into is None:
            continue
        if owns is not None and into is out.fingerprints and not owns(rec.headers, rec.body):
            out.not_owned += 1
            continue
        into[fingerprint(name, rec.headers, rec.body)] += 1
    return out


async def read_span(
    stream: S2Stream, start: int, end: int, *, patience: Patience = DEFAULT_PATIENCE
) -> AsyncIterator[SequencedRecord]:
    """The records of ``[start, end)`` (from the first kept, up to what was written), reads retried."""
    retrying = Retrying(patience, f"reading back {stream.name!r} from seq_num {start}")
    pos = start
    while pos < end:
        try:
            batch = await stream.read(start=SeqNum(pos), limit=ReadLimit(count=min(_PAGE, end - pos)))
        except ReadUnwrittenError:
            return
        except (S2ClientError, S2ServerError) as exc:
            await retrying.after(exc)
            continue
        retrying.progress()
        if not batch.records:
            return
        for rec in batch.records:
            if rec.seq_num >= end:
                return
            yield rec
        pos = batch.records[-1].seq_num + 1
