"""InsertEncoder: one record per row; body = JSON object of the data columns, or a raw ``value`` column."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import BinaryType, IntegralType, StringType, StructType

from s2_sink.encoders._arrow_json import json_objects
from s2_sink.encoders._arrow_types import check_json_type, column_type
from s2_sink.encoders._base import Encoder, raw_body, record_key, record_parts
from s2_sink.encoders._frame import ArrowParts, Rows
from s2_sink.errors import ConfigError

__all__ = ["InsertEncoder"]

Format = Literal["json", "raw"]


class InsertEncoder(Encoder):
    """One S2 record per row.

    - ``format="json"`` (default): the body is the JSON object of the data columns (all but the metadata,
      ``exclude_columns`` and routing columns; docs/encoding.md). ``key_column`` (string, binary or
      integral) is also the routing key and stays in the body.
    - ``format="raw"``: the body is ``value_column`` (binary, or string as UTF-8) as is; ``key_column``
      (optional) is the routing key. Other columns are not written.

    ``headers_column``: ``array<struct<key:string,value:binary>>`` → record headers.
    ``timestamp_column``: epoch milliseconds (integral) or ``timestamp`` → the record timestamp.
    """

    format: Format
    key_column: str | None
    value_column: str

    def __init__(
        self,
        format: Format = "json",
        *,
        headers_column: str | None = None,
        timestamp_column: str | None = None,
        key_column: str | None = None,
        value_column: str = "value",
        exclude_columns: Sequence[str] = (),
    ) -> None:
        if format not in ("json", "raw"):
            raise ConfigError(f"format must be 'json' or 'raw', got {format!r}")
        super().__init__(
            headers_column=headers_column, timestamp_column=timestamp_column, exclude_columns=exclude_columns
        )
        self.format = format
        self.key_column = key_column
        self.value_column = value_column

    def _metadata_columns(self) -> tuple[str, ...]:
        extra = (
            (self.value_column, *([self.key_column] if self.key_column else []))
            if self.format == "raw"
            else ()
        )
        return (*super()._metadata_columns(), *extra)

    def _validate(self, schema: StructType, data_columns: list[str]) -> None:
        if self.key_column is not None:
            ktype = column_type(schema, self.key_column, "key")
            if not isinstance(ktype, StringType | BinaryType | IntegralType):
                raise ConfigError(
                    f"key column {self.key_column!r} has type {ktype.simpleString()}; expected string, "
                    "binary or an integral type"
                )
        if self.format == "raw":
            vtype = column_type(schema, self.value_column, "value")
            if not isinstance(vtype, StringType | BinaryType):
                raise ConfigError(
                    f"value column {self.value_column!r} has type {vtype.simpleString()}; format='raw' needs "
                    "binary or string (use format='json' to encode other columns)"
                )
            return
        for name in data_columns:
            check_json_type(schema[name].dataType, name)

    def _encode(self, rows: Rows) -> ArrowParts:
        key, key_text = record_key(rows.batch, self.key_column)
        null_value = None
        if self.format == "raw":
            body, null_value = raw_body(rows.batch, self.value_column)
        else:
            body = pc.cast(json_objects(rows.batch, rows.schema, rows.data_columns), pa.binary())
        return record_parts(rows, body, rows.headers, key, key_text, null_value)
