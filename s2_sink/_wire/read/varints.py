"""Protobuf varints read at many positions of a message at once, over numpy.

The fast way reads the eight bytes at every position as one little-endian ``uint64`` word (a strided view of
the message, one gather), finds where each varint ends from the word's continuation bits and squeezes out the
seven-bit groups with a few shifts and masks: about fifteen passes over one word per varint, whatever their
sizes. A varint of nine or ten bytes (a value of 2**56 or more) does not fit a word: such calls read a block
of ten bytes per position instead, one column per byte.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

from s2_sink._wire.layout import Bytes, Ints

__all__ = ["TooLong", "read_varints"]

Values = npt.NDArray[np.uint64]

_WORD: Final = 8
_HIGH_BITS: Final = np.uint64(0x8080808080808080)
_LOW_SEVENS: Final = np.uint64(0x7F7F7F7F7F7F7F7F)
# Squeezing eight 7-bit groups, one byte apart, into 56 contiguous bits: pairs, then quads, then halves.
_SQUEEZE: Final = (
    (np.uint64(0x007F007F007F007F), np.uint64(0x7F007F007F007F00), np.uint64(1)),
    (np.uint64(0x00003FFF00003FFF), np.uint64(0x3FFF00003FFF0000), np.uint64(2)),
    (np.uint64(0x000000000FFFFFFF), np.uint64(0x0FFFFFFF00000000), np.uint64(4)),
)
_ONE: Final = np.uint64(1)
_BYTE_BITS: Final = np.uint64(8)
_SHIFTS: Final = np.arange(10, dtype=np.uint64) * np.uint64(7)


class TooLong(Exception):
    """A varint is longer than allowed, or runs past the end it must stay before."""


def read_varints(d: Bytes, pos: Ints, end: Ints, limit: int) -> tuple[Values, Ints]:
    """The varints at ``pos`` in ``d``: their values and sizes in bytes.

    Each must end before its ``end`` and take at most ``limit`` bytes (10 for a ``uint64``), else `TooLong`.
    """
    if not len(pos):
        return np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.int64)
    if len(d) >= _WORD:
        found = _in_words(d, pos)
        if found is not None:
            value, size = found
            if (size > limit).any() or (pos + size > end).any():
                raise TooLong
            return value, size
    return _in_blocks(d, pos, end, limit)


def _words_at(d: Bytes, pos: Ints) -> Values:
    """The eight bytes from each position as a little-endian word (zeros past the end of ``d``)."""
    n = len(d)
    words = np.ndarray(shape=(n - _WORD + 1,), dtype="<u8", buffer=d, strides=(1,))
    # The last words start at most eight bytes before the end: shift the bytes of later positions down.
    clamped = np.minimum(pos, n - _WORD)
    out: Values = words[clamped]
    behind = pos - clamped
    if behind.any():
        out >>= behind.astype(np.uint64) * _BYTE_BITS
    return out


def _in_words(d: Bytes, pos: Ints) -> tuple[Values, Ints] | None:
    """Values and sizes, or None if a varint does not end within its word."""
    word = _words_at(d, pos)
    ends = ~word & _HIGH_BITS  # the high bit of every byte that ends a varint
    if not ends.all():
        return None
    first_end = ends & (~ends + _ONE)  # the lowest of them
    value = word & ((first_end << _ONE) - _ONE) & _LOW_SEVENS
    for low, high, shift in _SQUEEZE:
        value = (value & low) | ((value & high) >> shift)
    # first_end is 2**(8 * size - 1): its float exponent is 8 * size.
    _, exponent = np.frexp(first_end.astype(np.float64))
    size: Ints = (exponent >> 3).astype(np.int64)
    return value, size


def _in_blocks(d: Bytes, pos: Ints, end: Ints, limit: int) -> tuple[Values, Ints]:
    """All ``limit`` bytes from each position at once, as a block of rows: each varint ends at its row's first
    byte under 0x80."""
    span = np.arange(limit)
    block = d[np.minimum(pos[:, None] + span, len(d) - 1)]
    last = block < 0x80
    if not last.any(axis=1).all():
        raise TooLong
    size = last.argmax(axis=1) + 1
    if (pos + size > end).any():
        raise TooLong  # runs past its end (the block reads on into what follows)
    digits = np.where(span < size[:, None], block & 0x7F, 0).astype(np.uint64)
    value: Values = (digits << _SHIFTS[:limit]).sum(axis=1, dtype=np.uint64)
    return value, size.astype(np.int64)
