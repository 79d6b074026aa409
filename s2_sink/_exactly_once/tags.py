"""Chunk tags: the ``@s2sink`` header on the first record of every append batch written exactly-once.

The last header of the record, so positional readers of the others (``@key``/``@action``) are undisturbed.
Value (ASCII)::

    1 <writer-hash8> <epoch> <batch> <partition> <attempt> <chunk> <count>
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["TAG_HEADER", "TAG_RESERVE_BYTES", "ChunkTag", "find_tag", "strip_tag"]

TAG_HEADER: Final = b"@s2sink"
_VERSION: Final = b"1"
TAG_RESERVE_BYTES: Final = 128  # metered bytes a chunk leaves free for its tag (the longest, rounded up)


@dataclass(frozen=True, slots=True)
class ChunkTag:
    """Identity of one atomic append batch (a chunk) written by an exactly-once writer."""

    writer: str  # `fencing.writer_hash`
    epoch: int
    batch: int
    partition: int  # in a content replay: the content-hash partition
    attempt: int
    chunk: int  # index among this attempt's appends to the stream
    count: int  # records in the chunk, this one included

    def encode(self) -> tuple[bytes, bytes]:
        fields = (self.epoch, self.batch, self.partition, self.attempt, self.chunk, self.count)
        value = b" ".join((_VERSION, self.writer.encode(), *(str(f).encode() for f in fields)))
        return (TAG_HEADER, value)

    @classmethod
    def decode(cls, value: bytes) -> ChunkTag | None:
        parts = value.split(b" ")
        if len(parts) != 8 or parts[0] != _VERSION:
            return None
        try:
            nums = [int(p) for p in parts[2:]]
            writer = parts[1].decode("ascii")
        except (ValueError, UnicodeDecodeError):
            return None
        if len(writer) != 8 or any(n < 0 for n in nums) or nums[5] < 1:
            return None
        return cls(writer, nums[0], nums[1], nums[2], nums[3], nums[4], nums[5])


def find_tag(headers: list[tuple[bytes, bytes]]) -> ChunkTag | None:
    """The chunk tag among a record's headers (the last ``@s2sink`` header wins)."""
    for name, value in reversed(headers):
        if name == TAG_HEADER:
            return ChunkTag.decode(value)
    return None


def strip_tag(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    return [(n, v) for n, v in headers if n != TAG_HEADER]
