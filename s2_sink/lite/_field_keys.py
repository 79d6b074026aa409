"""The protobuf key bytes (field number << 3 | wire type) the append scans read and write.

An ``AppendInput`` holds records (``AppendRecord``: timestamp, headers, body; a ``Header``: name, value);
the stored part of a ``SequencedRecord`` holds the same headers and body under other field numbers.
"""

from __future__ import annotations

from typing import Final

__all__ = ["BODY", "HEADER", "NAME", "RECORD", "SEQ_BODY", "SEQ_HEADER", "TIMESTAMP", "VALUE"]

RECORD: Final = 0x0A
"""``AppendInput.records`` (1, length-delimited)."""
TIMESTAMP: Final = 0x08
"""``AppendRecord.timestamp`` (1, varint)."""
HEADER: Final = 0x12
"""``AppendRecord.headers`` (2, length-delimited)."""
BODY: Final = 0x1A
"""``AppendRecord.body`` (3, length-delimited)."""
NAME: Final = 0x0A
"""``Header.name`` (1, length-delimited)."""
VALUE: Final = 0x12
"""``Header.value`` (2, length-delimited)."""
SEQ_HEADER: Final = 0x1A
"""``SequencedRecord.headers`` (3, length-delimited)."""
SEQ_BODY: Final = 0x22
"""``SequencedRecord.body`` (4, length-delimited)."""
