"""The recovery layout's hashes come from the xxhash and mmh3 libraries; they equal the pure-Python
reference (`_reference_hashes`, itself checked against Spark in the integration suite) on every input."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from s2_sink._exactly_once.recovery_layout import _murmur3_long, _xxh64

from ._reference_hashes import _murmur3_long as reference_murmur3_long
from ._reference_hashes import _xxh64 as reference_xxh64

SEEDS = st.one_of(st.sampled_from([0, 42, (1 << 64) - 1, 1 << 63]), st.integers(0, (1 << 64) - 1))


@given(data=st.binary(max_size=200), seed=SEEDS)
def test_xxh64_equals_the_reference(data: bytes, seed: int) -> None:
    """XXH64 of any bytes (every length class: under 4, 4-7, 8-31, stripes of 32 and tails) and any seed."""
    assert _xxh64(data, seed) == reference_xxh64(data, seed)


@given(value=st.integers(-(1 << 63), (1 << 63) - 1), seed=st.integers(0, (1 << 32) - 1))
def test_murmur3_long_equals_the_reference(value: int, seed: int) -> None:
    """Spark's ``hashLong`` of any signed long, any seed, as a signed 32-bit value."""
    assert _murmur3_long(value, seed) == reference_murmur3_long(value, seed)


def test_murmur3_long_at_the_extremes() -> None:
    """The values where sign handling goes wrong first: 0, -1 and both ends of the long range."""
    for value in (0, -1, 1, (1 << 63) - 1, -(1 << 63)):
        assert _murmur3_long(value, 42) == reference_murmur3_long(value, 42)
