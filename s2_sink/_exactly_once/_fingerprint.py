"""Record fingerprints: a canonical hash of what a reader sees of a record, minus our chunk tag.

Retries and replays subtract the multiset of fingerprints already in the stream from what they are about
to write. The fingerprint covers the stream name, the headers (in order, without the ``@s2sink`` tag) and
the body. It leaves out the timestamp: S2 may raise or cap client timestamps, so the stored value can
differ from the one sent. Two records that differ only in timestamp count as the same content.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence

from s2_sink._exactly_once._tags import TAG_HEADER

__all__ = ["Fingerprints", "fingerprint"]

Fingerprints = Counter[bytes]
"""A multiset of fingerprints."""


def _frame(h: hashlib.blake2b, data: bytes) -> None:
    # Length-prefixed, so field boundaries cannot be forged by content.
    h.update(len(data).to_bytes(4, "big"))
    h.update(data)


def fingerprint(stream: str, headers: Iterable[tuple[bytes, bytes]] | None, body: bytes) -> bytes:
    """16-byte BLAKE2b of (stream, headers without the tag, body)."""
    h = hashlib.blake2b(digest_size=16)
    _frame(h, stream.encode())
    kept: Sequence[tuple[bytes, bytes]] = [(n, v) for n, v in (headers or ()) if n != TAG_HEADER]
    h.update(len(kept).to_bytes(4, "big"))
    for name, value in kept:
        _frame(h, name)
        _frame(h, value)
    _frame(h, body)
    return h.digest()
