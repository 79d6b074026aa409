"""Decoders, the encoders' inverse, Spark-free: ``decode_json`` (JSON bodies → an Arrow batch of a Spark
schema's fields; missing fields null, unknown ones ignored) and ``decode_upsert`` (Flink-connector upsert
records → ``UpsertChange``).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import math
import struct
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal, Protocol

import orjson
import pyarrow as pa
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DayTimeIntervalType,
    DecimalType,
    DoubleType,
    FloatType,
    MapType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from s2_sink.encoders._arrow_json import parse_interval
from s2_sink.encoders._arrow_types import INTEGRAL_TYPES, check_json_type, to_arrow_schema
from s2_sink.encoders._upsert import ACTION_HEADER, KEY_HEADER
from s2_sink.errors import EncodeError

__all__ = ["UpsertChange", "decode_json", "decode_upsert", "parse_interval"]

Convert = Callable[[Any], Any]

_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _timestamp(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    if value.tzinfo is None:  # an instant without offset: read it as UTC, as the encoder writes UTC
        return value.replace(tzinfo=dt.UTC)
    return value.astimezone(dt.UTC)


def _double(value: Any) -> float:
    return _NON_FINITE[value] if isinstance(value, str) else float(value)


def _float32(value: Any) -> float:
    """The float32 the text denotes (the shortest text of a float32 is not the nearest double)."""
    x = _double(value)
    try:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except OverflowError:  # a value beyond float32's range is +-inf in Spark too
        return math.copysign(math.inf, x)


def _map_key(dtype: DataType) -> Convert:
    if isinstance(dtype, BooleanType):
        return lambda k: k == "true"
    if isinstance(dtype, INTEGRAL_TYPES):
        return int
    return str


def _decimal(value: Any) -> Decimal:
    return value if isinstance(value, Decimal) else Decimal(value)


# Parsed JSON value (never None) -> the Python value Arrow takes for the type; strings, booleans, integers
# and NullType (only null ever arrives) pass as they are.
_ATOMIC: dict[type[DataType], Convert] = {
    DoubleType: _double,
    FloatType: _float32,
    DecimalType: _decimal,
    BinaryType: base64.b64decode,
    DateType: dt.date.fromisoformat,
    TimestampType: _timestamp,
    TimestampNTZType: dt.datetime.fromisoformat,
    DayTimeIntervalType: parse_interval,
}


def _converter(dtype: DataType) -> Convert:
    if isinstance(dtype, ArrayType):
        item = _nullable(_converter(dtype.elementType))
        return lambda v: [item(x) for x in v]
    if isinstance(dtype, MapType):
        key, value = _map_key(dtype.keyType), _nullable(_converter(dtype.valueType))
        return lambda v: [(key(k), value(x)) for k, x in v.items()]
    if isinstance(dtype, StructType):
        fields = [(f.name, _nullable(_converter(f.dataType))) for f in dtype.fields]
        return lambda v: {name: conv(v.get(name)) for name, conv in fields}
    return _ATOMIC.get(type(dtype), _identity)


def _identity(value: Any) -> Any:
    return value


def _nullable(conv: Convert) -> Convert:
    return lambda v: None if v is None else conv(v)


def _has_decimal(dtype: DataType) -> bool:
    if isinstance(dtype, DecimalType):
        return True
    if isinstance(dtype, StructType):
        return any(_has_decimal(f.dataType) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return _has_decimal(dtype.elementType)
    if isinstance(dtype, MapType):
        return _has_decimal(dtype.valueType)
    return False


def _loads(exact_decimals: bool) -> Callable[[bytes], Any]:
    if exact_decimals:  # orjson reads numbers as floats; decimals must not pass through binary floating point
        return lambda body: json.loads(body, parse_float=Decimal)
    return orjson.loads


# What a JSON value that does not fit its field raises on the way into Arrow (OverflowError: an integer
# beyond int64, e.g. 9223372036854775808 for a long).
_VALUE_ERRORS = (ValueError, TypeError, KeyError, AttributeError, OverflowError, pa.ArrowException)


def decode_json(bodies: Sequence[bytes] | pa.Array, schema: StructType) -> pa.RecordBatch:
    """JSON object bodies → one column per field of ``schema``: the inverse of ``encode_arrow`` on every
    supported type. EncodeError names the record and the field of a body that does not fit.
    """
    for field in schema.fields:
        check_json_type(field.dataType, field.name)
    if isinstance(bodies, pa.Array | pa.ChunkedArray):
        bodies = bodies.to_pylist()
    loads = _loads(_has_decimal(schema))
    rows: list[dict[str, Any]] = []
    for i, body in enumerate(bodies):
        try:
            row = loads(body)
        except ValueError as exc:
            raise EncodeError(f"record {i} is not JSON: {exc}") from exc
        if not isinstance(row, dict):
            raise EncodeError(f"record {i} is JSON {type(row).__name__}, expected an object")
        rows.append(row)
    arrow_schema = to_arrow_schema(schema)
    columns = []
    for field, arrow_field in zip(schema.fields, arrow_schema, strict=True):
        conv = _nullable(_converter(field.dataType))
        name = field.name
        try:
            values = [conv(row.get(name)) for row in rows]
            columns.append(pa.array(values, arrow_field.type))
        except _VALUE_ERRORS as exc:
            bad = _first_bad_row(rows, name, conv, arrow_field.type)
            raise EncodeError(
                f"field {name!r} ({field.dataType.simpleString()}) of record {bad} cannot be decoded: {exc}"
            ) from exc
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema)


def _first_bad_row(rows: list[dict[str, Any]], name: str, conv: Convert, atype: pa.DataType) -> int | str:
    for i, row in enumerate(rows):
        try:
            pa.array([conv(row.get(name))], atype)
        except _VALUE_ERRORS:
            return i
    return "?"


class _RecordLike(Protocol):
    @property
    def headers(self) -> Sequence[tuple[bytes, bytes]]: ...

    @property
    def body(self) -> bytes: ...


@dataclass(frozen=True, slots=True)
class UpsertChange:
    """One upsert record: key object, ``"u"`` (insert/update) or ``"d"`` (delete), value (None for d)."""

    key: dict[str, Any]
    action: Literal["u", "d"]
    value: dict[str, Any] | None


def decode_upsert(
    records: Iterable[_RecordLike | tuple[Sequence[tuple[bytes, bytes]], bytes]],
    *,
    schema: StructType | None = None,
) -> list[UpsertChange]:
    """Records in the Flink S2 connector's upsert format (``@key``/``@action`` headers): SDK records or
    ``(headers, body)`` pairs. With ``schema`` (key and value columns) values are typed as ``decode_json``
    types them. A record without both headers, or with another action, raises EncodeError.
    """
    changes: list[UpsertChange] = []
    typed = _nullable(_converter(schema)) if schema is not None else None
    loads = _loads(schema is not None and _has_decimal(schema))
    for i, record in enumerate(records):
        headers, body = record if isinstance(record, tuple) else (record.headers, record.body)
        named = dict(reversed(list(headers)))  # the first of a name counts, as format("s2") reads it
        key_json, action = named.get(KEY_HEADER), named.get(ACTION_HEADER)
        if key_json is None or action is None:
            names = [n for n, _ in headers]
            raise EncodeError(f"record {i}: key or action not found in record headers {names}")
        if action not in (b"u", b"d"):
            raise EncodeError(f"record {i}: unknown @action {action!r} (expected b'u' or b'd')")
        key = loads(key_json)
        value = loads(body) if action == b"u" else None
        if typed is not None:
            key = {k: v for k, v in typed(key).items() if k in key}
            value = {k: v for k, v in typed(value).items() if k in value} if value is not None else None
        changes.append(UpsertChange(key=key, action="u" if action == b"u" else "d", value=value))
    return changes
