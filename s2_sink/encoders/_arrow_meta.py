"""The record frame's metadata columns over Arrow batches: headers, timestamps, metered size, errors."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from s2_sink.encoders._frame import (
    HEADERS_ARROW_TYPE,
    MAX_RECORD_BYTES,
    ArrowParts,
    Rows,
    list_parts,
    per_row_sum,
)
from s2_sink.encoders._metered import metered_bytes

__all__ = ["first_error", "headers", "key", "oversize_errors", "parts", "raw_body", "timestamp"]


def first_error(n: int, *errors: pa.Array | None) -> pa.Array:
    """Row-wise first non-null message."""
    present = [e for e in errors if e is not None and e.null_count != len(e)]
    if not present:
        return pa.nulls(n, pa.string())
    return present[0] if len(present) == 1 else pc.coalesce(*present)


def key(batch: pa.RecordBatch, column: str | None) -> tuple[pa.Array, pa.Array | None]:
    """(``_s2_key`` from a string, binary or integral column, its text for messages or None)."""
    if column is None:
        return pa.nulls(len(batch), pa.binary()), None
    col = batch.column(column)
    if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
        binary = pc.cast(col, pa.binary())
        return binary, binary
    text = pc.cast(col, pa.string())
    return pc.cast(text, pa.binary()), text


def parts(
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


def headers(batch: pa.RecordBatch, column: str | None) -> tuple[pa.Array, pa.Array | None]:
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


def timestamp(batch: pa.RecordBatch, column: str | None) -> tuple[pa.Array, pa.Array | None]:
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
