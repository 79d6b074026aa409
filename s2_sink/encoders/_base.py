"""What every encoder shares: metadata columns, driver-side validation and the Arrow entry points.

Encoders run wherever the rows are (write tasks, the driver, tools and tests); ``validate`` runs once on
the driver, ``encode_frame`` per Arrow batch without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from s2_sink.encoders import _arrow_meta
from s2_sink.encoders._arrow_types import check_headers_column, check_timestamp_column, require_column
from s2_sink.encoders._frame import ArrowParts, Rows, frame_arrow_schema, raise_for_errors
from s2_sink.errors import ConfigError

__all__ = ["Encoder", "ErrorMode"]

ErrorMode = Literal["raise", "column"]


class Encoder:
    """Base of InsertEncoder, UpsertEncoder and KafkaEncoder: plain data only, so it pickles to executors."""

    headers_column: str | None
    timestamp_column: str | None
    exclude_columns: tuple[str, ...]

    def __init__(
        self,
        *,
        headers_column: str | None,
        timestamp_column: str | None,
        exclude_columns: Sequence[str],
    ) -> None:
        if isinstance(exclude_columns, str):
            raise ConfigError(
                f"exclude_columns must be a list of column names, got the string {exclude_columns!r}"
            )
        self.headers_column = headers_column
        self.timestamp_column = timestamp_column
        self.exclude_columns = tuple(exclude_columns)

    @property
    def change_order(self) -> tuple[str, ...]:
        """``UpsertEncoder``'s ``order_by``; empty when the input order is the order."""
        return ()

    @property
    def arranges(self) -> bool:
        """Whether `encode_frame` reorders or drops good rows (a writer may arrange a whole batch itself)."""
        return False

    def _bind(self, columns: Sequence[str]) -> Encoder:
        return self

    def _metadata_columns(self) -> tuple[str, ...]:
        return tuple(c for c in (self.headers_column, self.timestamp_column) if c is not None)

    def _validate(self, schema: StructType, data_columns: list[str]) -> None:
        raise NotImplementedError

    def _encode(self, rows: Rows) -> ArrowParts:
        raise NotImplementedError

    def data_columns(self, schema: StructType, exclude: Sequence[str] = ()) -> list[str]:
        skip = {*self._metadata_columns(), *self.exclude_columns, *exclude}
        return [c for c in schema.fieldNames() if c not in skip]

    def input_columns(self, schema: StructType, exclude: Sequence[str] = ()) -> list[str]:
        """The columns the encoder reads, in schema order: what a writer ships to its tasks."""
        enc = self._bind(schema.fieldNames())
        read = {*enc._metadata_columns(), *enc.data_columns(schema, exclude)}
        return [c for c in schema.fieldNames() if c in read]

    def validate(self, schema: StructType, *, keep: Sequence[str] = (), exclude: Sequence[str] = ()) -> None:
        """ConfigError naming the column and its type; ``keep``: columns carried into the frame, ``exclude``:
        columns (e.g. the routing column) not part of the body."""
        enc = self._bind(schema.fieldNames())
        for name in (*keep, *exclude, *enc.exclude_columns):
            require_column(schema, name, "kept" if name in keep else "excluded")
        if enc.headers_column is not None:
            check_headers_column(schema, enc.headers_column)
        if enc.timestamp_column is not None:
            check_timestamp_column(schema, enc.timestamp_column)
        enc._validate(schema, enc.data_columns(schema, exclude))

    def encode_arrow(
        self,
        batch: pa.RecordBatch,
        *,
        schema: StructType | None = None,
        keep: Sequence[str] = (),
        exclude: Sequence[str] = (),
        errors: ErrorMode = "raise",
        stream: str | None = None,
    ) -> pa.RecordBatch:
        """The record frame of an Arrow batch (validated first).

        ``schema``: the batch's Spark schema (tells day-time interval fields apart; derived from the Arrow
        types when omitted). ``errors="raise"`` raises EncodeError (naming ``stream``) if a row cannot be
        encoded; ``errors="column"`` leaves the reasons in ``_s2_error``.
        """
        if schema is None:
            schema = from_arrow_schema(batch.schema, prefer_timestamp_ntz=True)
        self.validate(schema, keep=keep, exclude=exclude)
        frame = self.encode_frame(batch, schema=schema, keep=keep, exclude=exclude)
        if errors == "raise":
            raise_for_errors(frame, stream=stream)
        return frame

    def encode_frame(
        self,
        batch: pa.RecordBatch,
        *,
        schema: StructType,
        keep: Sequence[str] = (),
        exclude: Sequence[str] = (),
        arranged: bool = True,
        flat_changelog: bool = False,
    ) -> pa.RecordBatch:
        """`encode_arrow` of a batch `validate` accepted, without raising. ``arranged=False``: input order,
        nothing compacted (the writer arranges in Spark); ``flat_changelog``: upsert headers in ``_s2_key``
        and ``_s2_action`` (`_changelog`) where rows are not arranged."""
        enc = self._bind(schema.fieldNames())
        headers, headers_error = _arrow_meta.headers(batch, enc.headers_column)
        timestamp, ts_error = _arrow_meta.timestamp(batch, enc.timestamp_column)
        error = _arrow_meta.first_error(len(batch), headers_error, ts_error)
        data_columns = enc.data_columns(schema, exclude)
        parts = enc._encode(
            Rows(batch, schema, data_columns, headers, timestamp, error, arranged, flat_changelog)
        )
        src = parts.source
        kept = pa.schema([src.schema.field(c) for c in keep])
        return pa.RecordBatch.from_arrays(
            [
                parts.body,
                parts.headers,
                parts.timestamp,
                parts.key,
                parts.error,
                *([] if parts.action is None else [parts.action]),
                *(src.column(c) for c in keep),
            ],
            schema=frame_arrow_schema(kept, action=parts.action is not None),
        )

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"
