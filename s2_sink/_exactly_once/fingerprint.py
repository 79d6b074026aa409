"""Record fingerprints: a canonical hash of what a reader sees of a record, minus our chunk tag.

Retries and replays subtract the multiset of fingerprints already in the stream. Left out: the timestamp
(S2 may raise or cap it) and the headers saying where a record was written from, which differ between a run
and its replay (the ``@s2sink`` tag, a dead letter's ``s2sink-partition``)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink.encoders._frame import DLQ_ERROR, DLQ_PARTITION

__all__ = ["Fingerprints", "fingerprint"]

Fingerprints = Counter[bytes]  # a multiset


def _frame(h: hashlib.blake2b, data: bytes) -> None:
    # Length-prefixed, so field boundaries cannot be forged by content.
    h.update(len(data).to_bytes(4, "big"))
    h.update(data)


_TAG_ONLY: Final = frozenset((TAG_HEADER,))
_DEAD_LETTER_PLACEMENT: Final = frozenset((TAG_HEADER, DLQ_PARTITION))


def fingerprint(stream: str, headers: Iterable[tuple[bytes, bytes]] | None, body: bytes) -> bytes:
    """16-byte BLAKE2b of (stream, headers without the placement headers, body)."""
    h = hashlib.blake2b(digest_size=16)
    _frame(h, stream.encode())
    given = list(headers or ())
    # s2sink-partition is placement only on a dead letter (it has s2sink-error); elsewhere it is user content.
    placement = _DEAD_LETTER_PLACEMENT if any(n == DLQ_ERROR for n, _ in given) else _TAG_ONLY
    kept: Sequence[tuple[bytes, bytes]] = [(n, v) for n, v in given if n not in placement]
    h.update(len(kept).to_bytes(4, "big"))
    for name, value in kept:
        _frame(h, name)
        _frame(h, value)
    _frame(h, body)
    return h.digest()
