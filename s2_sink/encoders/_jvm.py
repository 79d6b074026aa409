"""Spark Column expressions for the encoders' ``project()``: pure DataFrame API, so Spark Connect works.

Everything here runs inside the JVM; no Python UDF touches a row.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import ByteType, DataType, IntegerType, LongType, ShortType, StructType, TimestampType

from s2_sink.encoders import _messages as msg
from s2_sink.encoders._arrow_json import json_string
from s2_sink.encoders._frame import HEADERS_DDL, MAX_RECORD_BYTES
from s2_sink.encoders._metered import HEADER_OVERHEAD, RECORD_OVERHEAD

__all__ = [
    "JSON_OPTIONS",
    "col",
    "first_error",
    "headers_expr",
    "json_body",
    "json_key",
    "metered_expr",
    "oversize_error",
    "timestamp_expr",
]

#: Options that pin ``to_json`` output regardless of session settings (see docs/encoding.md).
JSON_OPTIONS = {
    "timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX",
    "timestampNTZFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSS",
    "dateFormat": "yyyy-MM-dd",
    "timeZone": "UTC",
    "ignoreNullFields": "false",
}


def col(name: str) -> Column:
    """A top-level column by its exact name (dots and backticks in names are not paths)."""
    return F.col("`" + name.replace("`", "``") + "`")


def json_body(columns: Sequence[str]) -> Column:
    """The JSON object of ``columns`` as UTF-8 bytes (``{}`` when there are none)."""
    if not columns:
        return F.lit("{}").cast("binary")
    return F.to_json(F.struct(*[col(c) for c in columns]), JSON_OPTIONS).cast("binary")


def json_key(schema: StructType, columns: Sequence[str]) -> Column:
    """`json_body` of ``columns`` (an upsert key), spelled with ``concat`` when every column is an integer:
    ``to_json`` runs a JSON generator per row, which costs more than writing the digits (the usual key is
    an id), and an integer's JSON is its decimal digits, as ``cast(... as string)`` writes them."""
    if not columns or not all(isinstance(schema[c].dataType, _INTEGERS) for c in columns):
        return json_body(columns)
    parts: list[Column] = []
    for i, name in enumerate(columns):
        digits = F.coalesce(col(name).cast("string"), F.lit("null"))  # to_json writes a null as null
        parts += [F.lit(("{" if i == 0 else ",") + json_string(name) + ":"), digits]
    return F.concat(*parts, F.lit("}")).cast("binary")


_INTEGERS = (ByteType, ShortType, IntegerType, LongType)


def headers_expr(column: str | None) -> tuple[Column, Column]:
    """(``_s2_headers`` from a Kafka-shaped ``array<struct<key,value>>`` column, its error or null)."""
    if column is None:
        return F.lit(None).cast(HEADERS_DDL), F.lit(None).cast("string")
    headers_col = col(column)
    headers = F.transform(
        headers_col,
        lambda h: F.struct(
            h["key"].cast("binary").alias("name"),
            F.coalesce(h["value"].cast("binary"), F.lit(b"")).alias("value"),
        ),
    )
    bad = F.exists(headers_col, lambda h: h["key"].isNull() | (F.length(h["key"]) == 0))
    return headers, F.when(bad, F.lit(msg.empty_header_name(column)))


def timestamp_expr(column: str | None, dtype: DataType | None) -> tuple[Column, Column]:
    """(``_s2_timestamp`` in ms from a long-ms or timestamp column, its error or null)."""
    if column is None:
        return F.lit(None).cast("bigint"), F.lit(None).cast("string")
    ts = col(column)
    millis = F.unix_millis(ts) if isinstance(dtype, TimestampType) else ts.cast("bigint")
    error = F.when(millis < 0, F.concat(F.lit(msg.negative_timestamp_prefix(column)), millis.cast("string")))
    return millis, error


def metered_expr(body: Column, headers: Column | None, fixed: Column | int = 0) -> Column:
    """S2's metered size (see `_metered`): 8 + 2*len(headers) + sum(len(name) + len(value)) + len(body).

    ``headers`` is a headers column whose size is only known per row (summed with ``aggregate``, which
    leaves whole-stage codegen, so it is skipped when there is none); ``fixed`` is the size of headers the
    caller knows statically (the upsert ``@key``/``@action`` pair).
    """
    size = F.lit(RECORD_OVERHEAD).cast("bigint") + F.octet_length(body) + fixed
    if headers is None:
        return size
    header_bytes = F.aggregate(
        F.coalesce(headers, F.array().cast(HEADERS_DDL)),
        F.lit(0).cast("bigint"),
        lambda acc, h: acc + F.octet_length(h["name"]) + F.octet_length(h["value"]) + HEADER_OVERHEAD,
    )
    return size + header_bytes


def oversize_error(size: Column, key_text: Column | None) -> Column:
    """The over-1-MiB message for rows whose metered ``size`` exceeds the limit, naming the key if any."""
    text = F.concat(F.lit(msg.OVERSIZE_PREFIX), size.cast("string"), F.lit(msg.OVERSIZE_SUFFIX))
    if key_text is not None:
        text = F.concat(
            text,
            F.when(
                key_text.isNotNull(), F.concat(F.lit(" (key "), F.substring(key_text, 1, 200), F.lit(")"))
            ).otherwise(F.lit("")),
        )
    return F.when(size > MAX_RECORD_BYTES, text)


def first_error(*errors: Column) -> Column:
    """The first non-null error message, in the order given."""
    return F.coalesce(*errors) if len(errors) > 1 else errors[0]
