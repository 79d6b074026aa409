"""The columns of ``s2.format=kafka`` that come from a record's headers and body, for all records at once.

- ``key``: the value of the record's first ``@kafka-key`` header (the one `encoders.KafkaEncoder` writes
  first), null without one.
- ``headers``: the record's headers in order, without that first key header (a later ``@kafka-key`` is
  user data and stays) and without every exactly-once chunk tag ``@s2sink`` (the sink's bookkeeping:
  written back, it would claim a foreign chunk); names as text, invalid UTF-8 replaced.
- ``value``: the body.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import pyarrow as pa

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink._read.rows.header_text import entry_owners, first_header, named, take_or_null, utf8_text
from s2_sink._wire.arrow_arrays import int32_array, take
from s2_sink._wire.read.record_columns import RecordColumns
from s2_sink.encoders._kafka import KAFKA_KEY_HEADER

__all__ = ["KAFKA_RECORD_COLUMNS", "kafka_column"]

KAFKA_RECORD_COLUMNS: Final = frozenset({"key", "value", "headers"})
"""The kafka columns built here; the others are the record's position."""


def kafka_column(name: str, columns: RecordColumns) -> pa.Array:
    """The kafka column ``name`` (one of `KAFKA_RECORD_COLUMNS`) of every record."""
    if name == "value":
        return columns.bodies
    if name == "key":
        return take_or_null(columns.values, first_header(columns, KAFKA_KEY_HEADER))
    if name == "headers":
        return _user_headers(columns)
    raise ValueError(f"{name!r} is not a kafka record column")


def _user_headers(columns: RecordColumns) -> pa.Array:
    owners = entry_owners(columns)
    keep = ~named(columns, TAG_HEADER)
    key = first_header(columns, KAFKA_KEY_HEADER, owners)
    keep[key[key >= 0]] = False
    kept = np.flatnonzero(keep)
    offsets = np.zeros(len(columns) + 1, dtype=np.int32)
    np.cumsum(np.bincount(owners[kept], minlength=len(columns)), out=offsets[1:])
    entries = pa.StructArray.from_arrays(
        [utf8_text(take(columns.names, kept)), take(columns.values, kept)], names=["key", "value"]
    )
    return pa.ListArray.from_arrays(int32_array(offsets), entries)
