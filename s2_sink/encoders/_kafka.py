"""KafkaEncoder: a Kafka-shaped frame written the way Kafka users expect (docs/kafka.md): ``value`` is the
body, ``key`` the first header ``@kafka-key`` (opaque bytes, not the upsert ``@key``), then ``headers``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Final

from pyspark.sql.types import BinaryType, StringType, StructType

from s2_sink.encoders._arrow_types import column_type
from s2_sink.encoders._base import Encoder, raw_body, record_key, record_parts
from s2_sink.encoders._frame import ArrowParts, Rows, prepend_headers
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
        body, null_value = raw_body(rows.batch, self.value_column)
        key, key_text = record_key(rows.batch, self.key_column)
        return record_parts(
            rows, body, prepend_headers([(KAFKA_KEY_HEADER, key)], rows.headers), key, key_text, null_value
        )
