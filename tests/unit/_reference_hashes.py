"""The recovery layout's hashes as first written here in pure Python (XXH64, Spark's Murmur3 ``hashLong``):
the reference the library-backed ones are held equal to (`test_recovery_hashes`)."""

from __future__ import annotations

import struct
from typing import Final

_M64: Final = (1 << 64) - 1
_M32: Final = (1 << 32) - 1
_P1: Final = 11400714785074694791
_P2: Final = 14029467366897019727
_P3: Final = 1609587929392839161
_P4: Final = 9650029242287828579
_P5: Final = 2870177450012600261


def _rotl64(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M64


def _round(acc: int, lane: int) -> int:
    return (_rotl64((acc + lane * _P2) & _M64, 31) * _P1) & _M64


def _merge(acc: int, lane: int) -> int:
    return ((acc ^ _round(0, lane)) * _P1 + _P4) & _M64


def _xxh64(data: bytes, seed: int) -> int:
    """XXH64 of `data` (unsigned `seed`, unsigned result): what Spark's ``XXH64.hashUnsafeBytes`` computes."""
    n = len(data)
    i = 0
    if n >= 32:
        v1, v2, v3, v4 = (seed + _P1 + _P2) & _M64, (seed + _P2) & _M64, seed, (seed - _P1) & _M64
        stripes = n // 32
        lanes = struct.unpack_from(f"<{stripes * 4}Q", data)
        for s in range(0, stripes * 4, 4):
            v1 = _round(v1, lanes[s])
            v2 = _round(v2, lanes[s + 1])
            v3 = _round(v3, lanes[s + 2])
            v4 = _round(v4, lanes[s + 3])
        h = (_rotl64(v1, 1) + _rotl64(v2, 7) + _rotl64(v3, 12) + _rotl64(v4, 18)) & _M64
        for v in (v1, v2, v3, v4):
            h = _merge(h, v)
        i = stripes * 32
    else:
        h = (seed + _P5) & _M64
    h = (h + n) & _M64
    while i + 8 <= n:
        (lane,) = struct.unpack_from("<Q", data, i)
        h = (_rotl64(h ^ _round(0, lane), 27) * _P1 + _P4) & _M64
        i += 8
    if i + 4 <= n:
        (word,) = struct.unpack_from("<I", data, i)
        h = (_rotl64(h ^ ((word * _P1) & _M64), 23) * _P2 + _P3) & _M64
        i += 4
    while i < n:
        h = (_rotl64(h ^ ((data[i] * _P5) & _M64), 11) * _P1) & _M64
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M64
    h ^= h >> 29
    h = (h * _P3) & _M64
    return h ^ (h >> 32)


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _M32
    k1 = ((k1 << 15) | (k1 >> 17)) & _M32
    return (k1 * 0x1B873593) & _M32


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = ((h1 << 13) | (h1 >> 19)) & _M32
    return (h1 * 5 + 0xE6546B64) & _M32


def _murmur3_long(value: int, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashLong`` (signed 32-bit result)."""
    v = value & _M64
    h1 = _mix_h1(_mix_h1(seed & _M32, _mix_k1(v & _M32)), _mix_k1(v >> 32))
    h1 ^= 8
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >> 31 else h1
