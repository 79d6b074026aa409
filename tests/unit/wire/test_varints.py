"""Varints read in bulk: the value and size protobuf's own encoding gives, at any position, of any size."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s2_sink._wire import read_batch as _varint_read
from s2_sink._wire.read_batch import NotCanonical, read_varints

uint64s = st.one_of(
    st.integers(0, 300), st.integers(0, 2**64 - 1), st.sampled_from([2**56 - 1, 2**56, 2**63])
)


def _varint(value: int) -> bytes:
    """Protobuf's encoding: seven bits per byte, low first, the high bit set on all but the last."""
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out + bytes([value]))


def _laid_out(values: list[int], gap: bytes) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The varints one after another with ``gap`` between them: the bytes, each one's start and end."""
    data, starts, ends = bytearray(gap), [], []
    for v in values:
        starts.append(len(data))
        data += _varint(v)
        ends.append(len(data))
        data += gap
    return np.frombuffer(bytes(data), dtype=np.uint8), np.array(starts, dtype=np.int64), np.array(ends)


@settings(max_examples=300, deadline=None)
@given(st.lists(uint64s, max_size=20), st.binary(max_size=9))
def test_values_and_sizes_are_protobufs(values: list[int], gap: bytes) -> None:
    """Every varint at its position, the last one flush with the end of the data or not, reads back as the
    value and size protobuf wrote, through the word path (values under 2**56) or the block path."""
    d, starts, ends = _laid_out(values, gap)
    got, size = read_varints(d, starts, ends, 10)
    assert got.tolist() == values
    assert size.tolist() == (ends - starts).tolist()


def test_both_paths_are_taken() -> None:
    """Values under 2**56 fit a word; a larger one sends the call down the block path: same answers."""
    small, large = [1, 300, 2**56 - 1], [1, 2**56, 2**64 - 1]
    for values in (small, large):
        d, starts, ends = _laid_out(values, b"")
        assert (_varint_read._in_words(d, starts) is None) == (values is large)
        assert read_varints(d, starts, ends, 10)[0].tolist() == values


def test_non_minimal_encodings_read_as_protobuf_reads_them() -> None:
    """``80 00`` is zero in two bytes (valid, if not what serializers write)."""
    d = np.frombuffer(bytes([0x80, 0x00, 0x81, 0x80, 0x00, 0x07]), dtype=np.uint8)
    value, size = read_varints(d, np.array([0, 2, 5]), np.array([6, 6, 6]), 10)
    assert value.tolist() == [0, 1, 7]
    assert size.tolist() == [2, 3, 1]


@pytest.mark.parametrize("data", [bytes([0x80] * 12), bytes([0x80] * 3), bytes([0xFF] * 8 + [0x01])])
def test_longer_than_the_limit_or_cut_at_the_end(data: bytes) -> None:
    """A varint with no last byte within the data, or longer than allowed, is refused."""
    d = np.frombuffer(data, dtype=np.uint8)
    with pytest.raises(NotCanonical):
        read_varints(d, np.array([0]), np.array([len(data)]), 5)


def test_a_varint_may_not_run_past_its_end() -> None:
    d, starts, _ = _laid_out([300, 5], b"")
    with pytest.raises(NotCanonical):
        read_varints(d, starts[:1], starts[:1] + 1, 10)  # 300 takes two bytes


def test_no_positions() -> None:
    value, size = read_varints(np.zeros(3, dtype=np.uint8), np.zeros(0, dtype=np.int64), np.zeros(0), 10)
    assert len(value) == len(size) == 0
