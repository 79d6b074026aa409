"""KafkaEncoder: a Kafka-shaped frame written the way Kafka users expect (docs/kafka.md): ``value`` is the
body, ``key`` the first header ``@kafka-key`` (opaque bytes, not the upsert ``@key``), then ``headers``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, StringType, StructType

from s2_sink.encoders import _arrow_meta
from s2_sink.encoders._base import Encoder
from s2_sink.encoders._column_checks import column_type
from s2_sink.encoders._frame import HEADERS_ARROW_TYPE, ArrowParts, Rows
from s2_sink.encoders._lists import list_parts
from s2_sink.errors import ConfigError

__all__ = ["KAFKA_KEY_HEADER", "KafkaEncoder"]

KAFKA_KEY_HEADER: Final = b"@kafka-key"


class KafkaEncoder(Encoder):
    """One S2 record per row of a Kafka-shaped frame; the key is also the routing key. ``key_column``,
    ``headers_column`` and ``timestamp_column`` default to ``key``, ``headers`` and ``timestamp`` where the
    frame has them; a name given must exist.
    """

    value_column: str
    key_column: str | None

    def __init__(
        self,
        *,
        value_column: str = "value",
        key_column: str | None = None,
        headers_column: str | None = None,
        timestamp_column: str | None = None,
    ) -> None:
        super().__init__(headers_column=headers_column, timestamp_column=timestamp_column, exclude_columns=())
        self.value_column = value_column
        self.key_column = key_column

    def _bind(self, columns: Sequence[str]) -> KafkaEncoder:
        bound = copy.copy(self)
        if bound.key_column is None and "key" in columns:
            bound.key_column = "key"
        if bound.headers_column is None and "headers" in columns:
            bound.headers_column = "headers"
        if bound.timestamp_column is None and "timestamp" in columns:
            bound.timestamp_column = "timestamp"
        return bound

    def _metadata_columns(self) -> tuple[str, ...]:
        key = (self.key_column,) if self.key_column else ()
        return (*super()._metadata_columns(), self.value_column, *key)

    def data_columns(self, schema: StructType, exclude: Sequence[str] = ()) -> list[str]:
        return []  # only value, key, headers and timestamp are written

    def _validate(self, schema: StructType, data_columns: list[str]) -> None:
        for role, name in (("value", self.value_column), ("key", self.key_column)):
            if name is None:
                continue
            dtype = column_type(schema, name, role)
            if not isinstance(dtype, StringType | BinaryType):
                raise ConfigError(
                    f"{role} column {name!r} has type {dtype.simpleString()}; a Kafka-shaped frame needs "
                    f"binary or string (cast it, e.g. to_json(...) or CAST({name} AS STRING))"
                )

    def _encode(self, rows: Rows) -> ArrowParts:
        body, null_value = _arrow_meta.raw_body(rows.batch, self.value_column)
        key, key_text = _arrow_meta.key(rows.batch, self.key_column)
        return _arrow_meta.parts(rows, body, _prepend_key(key, rows.headers), key, key_text, null_value)


def _prepend_key(key: pa.Array, headers: pa.Array) -> pa.Array:
    """Per row: ``[(@kafka-key, key)]`` when the key is not null, then the row's headers (null = none)."""
    offsets, entries = list_parts(headers)
    bounds = np.asarray(offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    lengths = bounds[1:] - bounds[:-1]
    own, src = lengths, np.arange(len(entries), dtype=np.int64)  # the entries of rows not null
    if headers.null_count:
        valid = np.asarray(headers.is_valid(), dtype=bool)
        own, src = np.where(valid, lengths, 0), np.flatnonzero(np.repeat(valid, lengths))
    has_key = np.asarray(key.is_valid(), dtype=bool)
    new = np.concatenate([[0], np.cumsum(has_key + own)])
    # A row's key (if any) at its start, its own headers after: every other entry, in order.
    keys = pc.drop_null(key)
    is_key = np.zeros(int(new[-1]), dtype=bool)
    is_key[new[:-1][has_key]] = True
    index = np.empty(len(is_key), dtype=np.int64)
    index[is_key] = np.arange(len(keys))
    index[~is_key] = len(keys) + src
    names = pa.concat_arrays([pa.array([KAFKA_KEY_HEADER] * len(keys), pa.binary()), entries.field(0)])
    values = pa.concat_arrays([keys, entries.field(1)])
    structs = pa.StructArray.from_arrays(
        [names.take(index), values.take(index)], fields=list(HEADERS_ARROW_TYPE.value_type)
    )
    return pa.ListArray.from_arrays(pa.array(new, pa.int32()), structs, type=HEADERS_ARROW_TYPE)
