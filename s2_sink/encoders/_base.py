"""What every encoder shares: metadata columns (headers, timestamps, keys, metered size, errors, over Arrow
batches), driver-side validation and the Arrow entry points.

Encoders run wherever the rows are (write tasks, the driver, tools and tests); ``validate`` runs once on
the driver, ``encode_frame`` per Arrow batch without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from s2_sink.encoders._arrow_types import check_headers_column, check_timestamp_column, require_column
from s2_sink.encoders._frame import (
    HEADERS_ARROW_TYPE,
    MAX_RECORD_BYTES,
    ArrowParts,
    Rows,
    frame_arrow_schema,
    list_parts,
    per_row_sum,
    raise_for_errors,
)
from s2_sink.encoders._metered import metered_bytes
from s2_sink.errors import ConfigError

__all__ = [
    "Encoder",
    "ErrorMode",
    "first_error",
    "oversize_errors",
    "raw_body",
    "read_headers",
    "read_timestamp",
    "record_key",
    "record_parts",
]

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
        headers, headers_error = read_headers(batch, enc.headers_column)
        timestamp, ts_error = read_timestamp(batch, enc.timestamp_column)
        error = first_error(len(batch), headers_error, ts_error)
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


def first_error(n: int, *errors: pa.Array | None) -> pa.Array:
    """Row-wise first non-null message."""
    present = [e for e in errors if e is not None and e.null_count != len(e)]
    if not present:
        return pa.nulls(n, pa.string())
    return present[0] if len(present) == 1 else pc.coalesce(*present)


def record_key(batch: pa.RecordBatch, column: str | None) -> tuple[pa.Array, pa.Array | None]:
    """(``_s2_key`` from a string, binary or integral column, its text for messages or None)."""
    if column is None:
        return pa.nulls(len(batch), pa.binary()), None
    col = batch.column(column)
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        binary = pc.cast(col, pa.binary())
        return binary, binary
    text = pc.cast(col, pa.string())
    return pc.cast(text, pa.binary()), text


def record_parts(
    rows: Rows,
    body: pa.Array,
    headers: pa.Array,
    key: pa.Array,
    key_text: pa.Array | None,
    *errors: pa.Array | None,
) -> ArrowParts:
    """One record per row: `rows`' errors, then `errors`, then records over the size limit."""
    oversize = oversize_errors(body, headers, key_text)
    error = first_error(len(body), rows.error, *errors, oversize)
    return ArrowParts(rows.batch, body, headers, rows.timestamp, key, error)


def raw_body(batch: pa.RecordBatch, column: str) -> tuple[pa.Array, pa.Array | None]:
    """(bodies from a binary or string column, null as b"", each null row's error or None)."""
    value = batch.column(column)
    body = pc.fill_null(pc.cast(value, pa.binary()), b"")
    if not value.null_count:
        return body, None
    text = f"value column {column!r} is null"
    return body, pc.if_else(pc.is_null(value), text, pa.scalar(None, pa.string()))


def read_headers(batch: pa.RecordBatch, column: str | None) -> tuple[pa.Array, pa.Array | None]:
    n = len(batch)
    if column is None:
        return pa.nulls(n, HEADERS_ARROW_TYPE), None
    col = batch.column(column)
    offsets, entries = list_parts(col)
    index = entries.type.get_field_index
    names = pc.cast(entries.field(index("key")), pa.binary())
    values = pc.fill_null(pc.cast(entries.field(index("value")), pa.binary()), b"")
    if entries.null_count:  # a null entry counts as an entry with a null key
        names = pc.if_else(entries.is_valid(), names, pa.scalar(None, pa.binary()))
    structs = pa.StructArray.from_arrays([names, values], fields=list(HEADERS_ARROW_TYPE.value_type))
    mask = col.is_null() if col.null_count else None
    out = pa.ListArray.from_arrays(offsets, structs, type=HEADERS_ARROW_TYPE, mask=mask)
    bad = pc.fill_null(pc.equal(pc.binary_length(names), 0), True)
    if not pc.any(bad).as_py():
        return out, None
    per_row = per_row_sum(offsets, pc.cast(bad, pa.int64()))
    bad_row = pc.and_(pc.greater(per_row, 0), pc.is_valid(col))
    # S2 reserves the empty header name for command records.
    empty = (
        f"headers column {column!r} has an entry with a null or empty key (S2 header names must be non-empty)"
    )
    return out, pc.if_else(bad_row, empty, pa.scalar(None, pa.string()))


def read_timestamp(batch: pa.RecordBatch, column: str | None) -> tuple[pa.Array, pa.Array | None]:
    n = len(batch)
    if column is None:
        return pa.nulls(n, pa.int64()), None
    col = batch.column(column)
    if pa.types.is_timestamp(col.type):
        micros = pc.cast(pc.cast(col, pa.timestamp("us", col.type.tz), safe=False), pa.int64())
        # floor division like Spark's unix_millis (Arrow's integer divide truncates toward zero)
        millis = pc.divide(pc.subtract(micros, pc.if_else(pc.less(micros, 0), 999, 0)), 1000)
    else:
        millis = pc.cast(col, pa.int64())
    negative = pc.less(millis, 0)
    if not pc.any(negative).as_py():
        return millis, None
    before_epoch = f"timestamp column {column!r} is before 1970-01-01 (S2 timestamps are unsigned ms): "
    text = pc.binary_join_element_wise(before_epoch, pc.cast(millis, pa.string()), "")
    return millis, pc.if_else(negative, text, pa.scalar(None, pa.string()))


def oversize_errors(
    body: pa.Array, headers: pa.Array, key_text: pa.Array | None, *, extra: pa.Array | None = None
) -> pa.Array | None:
    """Messages for records over 1 MiB metered (naming the key), or None; `extra`: headers carried beside
    `headers` (the changelog's flat form)."""
    sizes = metered_bytes(body, headers)
    if extra is not None:
        sizes = pc.add(sizes, extra)
    over = pc.greater(sizes, MAX_RECORD_BYTES)
    if not pc.any(over).as_py():
        return None
    keys = [_text(k) for k in key_text.to_pylist()] if key_text is not None else [None] * len(body)
    texts = [
        f"record of {size} metered bytes exceeds S2's 1 MiB ({MAX_RECORD_BYTES} bytes) record limit"
        + (f" (key {key[:200]})" if key is not None else "")
        if o
        else None
        for size, key, o in zip(sizes.to_pylist(), keys, over.to_pylist(), strict=True)
    ]
    return pa.array(texts, pa.string())


def _text(key: str | bytes | None) -> str | None:
    """A key for an error message; invalid UTF-8 replaced, as the JVM's cast to string does."""
    return key.decode("utf-8", "replace") if isinstance(key, bytes) else key
