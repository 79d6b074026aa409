"""The bulk scan's shortcut for batches whose records all share one leading layout, as an upsert batch's do:
the same number of headers, each with a name of the same length at the same place, a value of one-byte
length, and a body.

Such a record is ``(12 <hl> 0a <nl> <name> 12 <vl> <value>)* 1a <bl> <body>``, every length in its shortest
form. The first record gives the name lengths; in every record, each header then starts where the one
before it ends (one gather per header), and all headers are checked at once: eight bytes read as one word
from each header's start and from its value's key, compared with the template through masks, then
``hl = 4 + nl + vl`` with both lengths below 0x80 and ``vl`` not 0. The body must fill the rest of its
record, so its length follows from the record's end and is checked against the bytes there. About forty
numpy calls per batch, where the general scan makes a few per field and per varint byte.

Names are not compared, only their lengths (a name is any non-empty bytes; an empty one, a command record,
has another length). Anything else -- a record without a body, a header without a value, names of other
lengths, a timestamp, lengths of two bytes -- answers None, and the general scan reads the batch.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final, NamedTuple

import numpy as np
import numpy.typing as npt

from s2_sink.lite._field_keys import BODY, HEADER, NAME, VALUE

__all__ = ["UniformScan", "scan_uniform"]

Ints = npt.NDArray[np.int64]
Bytes = npt.NDArray[np.uint8]

#: Headers per record beyond which the shortcut is not tried (the general scan is as quick there).
_MAX_HEADERS: Final = 8
#: The longest name of a header of one-byte length with a value (``4 + nl + vl`` below 0x80, ``vl`` >= 1).
_MAX_NAME: Final = 122
#: What is compared of a header's first eight bytes (``12 hl 0a nl``): the keys, the name length and the
#: high bit of the header length.
_HEAD_MASK: Final = np.uint64(0xFFFF80FF)
#: And of a value's (``12 vl``): the key and the high bit of the length.
_VALUE_MASK: Final = np.uint64(0x80FF)


class UniformScan(NamedTuple):
    """What the shortcut found."""

    metered: Ints
    """Each record's metered size."""
    headers: Ints
    """Where every header starts (to be renumbered)."""
    bodies: Ints
    """Where every record's body starts (to be renumbered)."""


def scan_uniform(data: bytes, d: Bytes, content: Ints, end: Ints) -> UniformScan | None:
    """Read the records whose contents span ``[content, end)`` of `d` (the encoded input `data`, padded)
    if they all share the leading layout of the first one (see the module doc); else None."""
    name_lengths = _template(data, int(content[0]), int(end[0]))
    if name_lengths is None:
        return None
    try:
        return _scan(d, content, end, name_lengths)
    except IndexError:
        return None  # a length pointing past the padding: not this layout


def _scan(d: Bytes, content: Ints, end: Ints, name_lengths: tuple[int, ...]) -> UniformScan | None:
    n = len(content)
    # Where each header starts: the first at the record's content, each next one where the last one ended.
    starts = [content]
    pos = content
    for _ in name_lengths:
        pos = pos + 2 + d[pos + 1]
        starts.append(pos)
    body = starts.pop()
    # A record of another layout (a header more or fewer, a timestamp) mostly shows here, before the costlier
    # checks: where its body should start is no body key.
    if (d[body] != BODY).any():
        return None
    heads = np.concatenate(starts)
    value_offsets, expected = _layout(name_lengths, n)
    # Eight bytes from each header's start (``12 hl 0a nl``, then its name) and from its value key's
    # (``12 vl``, then its value): one gather each, then compared through masks.
    words = _words(d)
    head = words[heads]
    value = words[heads + value_offsets]
    hl = head.view(np.uint8)[1::8]
    vl = value.view(np.uint8)[1::8]
    # Keys and name length as the template says, the header's and value's lengths below 0x80; in uint8
    # arithmetic, ``hl - vl`` (both below 0x80) equals ``nl + 4`` (below 0x80 too) only if it is.
    bad = ((head & _HEAD_MASK) != expected) | ((value & _VALUE_MASK) != VALUE)
    bad |= (hl - vl != head.view(np.uint8)[3::8] + 4) | (vl == 0)
    if bad.any():
        return None
    blen = _body_lengths(d, body, end)
    if blen is None:
        return None
    header_sizes = hl.reshape(len(name_lengths), n).sum(axis=0, dtype=np.int64)
    # 8 per record, and per header 2 + name + value: its length less the keys and lengths of both.
    metered = header_sizes + blen + (8 - 2 * len(name_lengths))
    return UniformScan(metered, heads, body)


def _words(d: Bytes) -> npt.NDArray[np.uint64]:
    """Every eight bytes of `d` from each of its positions, as little-endian integers (a view)."""
    return np.ndarray(shape=(len(d) - 7,), dtype="<u8", buffer=d, strides=(1,))


def _template(data: bytes, start: int, end: int) -> tuple[int, ...] | None:
    """The name lengths of the first record's headers, if it has the layout the shortcut reads."""
    lengths: list[int] = []
    pos = start
    while pos < end and data[pos] == HEADER:
        if len(lengths) == _MAX_HEADERS or pos + 4 > end:
            return None
        hl, nl = data[pos + 1], data[pos + 3]
        if hl >= 0x80 or data[pos + 2] != NAME or nl == 0 or hl <= 2 + nl or nl > _MAX_NAME:
            return None  # a long header, an empty name or no value: the general scan decides
        lengths.append(nl)
        pos += 2 + hl
    if not lengths or pos >= end or data[pos] != BODY:
        return None
    return tuple(lengths)


@lru_cache(maxsize=16)
def _layout(name_lengths: tuple[int, ...], n: int) -> tuple[Ints, npt.NDArray[np.uint64]]:
    """For `n` records with headers of these name lengths (header-major: every first header, then every
    second...): where each header's value key is from its start, and its first eight bytes under
    ``_HEAD_MASK``."""
    offsets = np.repeat(np.array([4 + nl for nl in name_lengths], dtype=np.int64), n)
    heads = [HEADER | NAME << 16 | nl << 24 for nl in name_lengths]
    expected = np.repeat(np.array(heads, dtype=np.uint64), n)
    offsets.flags.writeable = False
    expected.flags.writeable = False
    return offsets, expected


def _body_lengths(d: Bytes, body: Ints, end: Ints) -> Ints | None:
    """The lengths of the bodies whose keys are at `body`, each of which must fill the rest of its record
    (to `end`), with a length of one or two bytes."""
    rest = end - body  # key, length and body
    low, high = int(rest.min()), int(rest.max())
    first = d[body + 1]
    if low >= 3 and high <= 129:  # one-byte lengths (1 to 127)
        blen = rest - 2
        bad = first != blen
    elif low >= 131 and high <= 16386:  # two-byte lengths (128 to 16383)
        blen = rest - 3
        bad = (first != ((blen & 0x7F) | 0x80)) | (d[body + 2] != (blen >> 7))
    elif low >= 3 and high <= 16386:
        two = rest >= 131
        blen = rest - 2 - two
        expect = np.where(two, (blen & 0x7F) | 0x80, blen)
        bad = (first != expect) | (two & (d[body + 2] != (blen >> 7))) | (rest == 130)
    else:
        return None  # a record without a body, or a body of 16 KiB or more
    if bad.any():
        return None
    return blen
