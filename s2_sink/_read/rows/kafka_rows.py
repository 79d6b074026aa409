"""``s2.format=kafka``'s rows from record columns: ``stream, seq_num, timestamp, key, value, headers``.

``key`` is the first ``@kafka-key`` header (`encoders.KafkaEncoder` writes it first); ``headers`` leave it
and every ``@s2sink`` chunk tag out (written back, a tag would claim a foreign chunk).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql.types import StructType

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink._wire.columns import (
    RecordColumns,
    StreamRuns,
    entry_owners,
    first_header,
    int32_array,
    named,
    rows_batch,
    take,
    take_or_null,
    utf8_text,
)
from s2_sink.encoders._kafka import KAFKA_KEY_HEADER

__all__ = ["kafka_batch"]


def kafka_batch(
    schema: StructType, stream: str | StreamRuns, columns: RecordColumns, target: pa.Schema
) -> pa.RecordBatch:
    from_record = {
        "value": lambda: columns.bodies,
        "key": lambda: take_or_null(columns.values, first_header(columns, KAFKA_KEY_HEADER)),
        "headers": lambda: _user_headers(columns),
    }
    return rows_batch(target, stream, columns, from_record)


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
