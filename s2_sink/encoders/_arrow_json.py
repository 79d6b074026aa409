"""Arrow columns → JSON text, column by column (the type mapping is docs/encoding.md's table).

A column's text is `Parts`: literals and null-free string arrays whose element-wise concatenation is each
row's JSON; an object is one concatenation of every column's parts between the field names, so quotes cost
no pass of their own. Only binary values (base64) and day-time intervals (Spark's ANSI literal, which its
JSON reader parses back) go value by value through Python.

Numbers are Arrow's text (shortest round-trip floats, ``BigDecimal``'s layout for decimals); a float Arrow
prints as an integer gets ``.0`` so type-inferring readers see a float; NaN and the infinities are Spark's
strings (``"NaN"``, ``"Infinity"``, ``"-Infinity"``).
"""

from __future__ import annotations

import binascii
import datetime as dt
import re
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
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
    NullType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from s2_sink.encoders._arrow_types import INTEGRAL_TYPES
from s2_sink.encoders._frame import list_parts

__all__ = [
    "Parts",
    "json_fragments",
    "json_object",
    "json_objects",
    "json_parts",
    "json_string",
    "parse_interval",
]

Parts: TypeAlias = list[pa.Array | str]

# Jackson's escapes: short forms for these five, \u00XX (upper-case hex) for the other control characters.
_ESCAPES = {i: f"\\u{i:04X}" for i in range(32)} | {
    8: "\\b",
    9: "\\t",
    10: "\\n",
    12: "\\f",
    13: "\\r",
    34: '\\"',
    92: "\\\\",
}


def json_string(text: str) -> str:
    """Escaped as Jackson (and so Spark's ``to_json``) escapes it."""
    return '"' + text.translate(_ESCAPES) + '"'


def _per_value(arr: pa.Array, fn: Callable[[Any], str]) -> pa.Array:
    return pa.array([_NULL_TEXT if v is None else fn(v) for v in arr.to_pylist()], pa.string())


_NULL_TEXT = "null"


def _finish(text: pa.Array, arr: pa.Array) -> pa.Array:
    if arr.null_count == 0:
        return text
    return pc.if_else(pc.is_valid(arr), text, _NULL_TEXT)


def _used_bytes(arr: pa.Array) -> bytes:
    data = arr.buffers()[2]
    if data is None or len(arr) == 0:
        return b""
    offsets = np.frombuffer(arr.buffers()[1], np.int32, len(arr) + 1, arr.offset * 4)
    start, end = int(offsets[0]), int(offsets[-1])
    used: bytes = data.slice(start, end - start).to_pybytes()
    return used


def _strings(arr: pa.Array) -> Parts:
    if not pa.types.is_string(arr.type):
        arr = arr.cast(pa.string())
    data = _used_bytes(arr)
    # byte scans at memory speed instead of a regex per row (no byte of a multi-byte UTF-8 character
    # is a control character, a quote or a backslash)
    codes = np.frombuffer(data, np.uint8)
    controls = np.unique(codes[codes < 0x20]) if codes.size and codes.min() < 0x20 else codes[:0]
    if not controls.size and b'"' not in data and b"\\" not in data:  # the common case: nothing to escape
        return ['"', arr, '"'] if arr.null_count == 0 else [_finish(_quoted(arr), arr)]
    escaped = pc.replace_substring(pc.replace_substring(arr, "\\", "\\\\"), '"', '\\"')
    for code in controls.tolist():  # Jackson's escape of each control character present
        escaped = pc.replace_substring(escaped, chr(code), _ESCAPES[code])
    return [_finish(_quoted(escaped), arr)]


def _quoted(arr: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', arr, '"', "")


_NON_FINITE = {"nan": '"NaN"', "inf": '"Infinity"', "-inf": '"-Infinity"'}


def _floats(arr: pa.Array) -> Parts:
    text = pc.cast(arr, pa.string())
    values = arr.to_numpy(zero_copy_only=False)  # nulls read as NaN: their text is replaced by the caller
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(values)
        integral = finite & (values == np.trunc(values))
    if not finite.all():
        text = pc.if_else(pa.array(finite), text, pc.fill_null(_non_finite(text), ""))
    if not integral.any():
        return [text]
    # Arrow writes 12.0 as "12", a JSON integer, which a reader inferring types would take for one (and
    # 1e15 as "1e+15", which is a floating-point number already)
    bare = pc.and_(pa.array(integral), pc.invert(pc.match_substring(text, "e")))
    return [text, pc.if_else(bare, ".0", "")]


def _non_finite(text: pa.Array) -> pa.Array:
    names = pa.array(list(_NON_FINITE))
    return pc.take(pa.array(list(_NON_FINITE.values())), pc.index_in(text, value_set=names))


def _join_lists(offsets: pa.Array, fragments: pa.Array, arr: pa.Array, open_: str, close: str) -> pa.Array:
    lists = pa.ListArray.from_arrays(offsets, fragments, mask=arr.is_null() if arr.null_count else None)
    joined = pc.binary_join(lists, ",")
    return _finish(pc.binary_join_element_wise(open_, pc.fill_null(joined, ""), close, ""), arr)


def _map_keys(keys: pa.Array, dtype: DataType) -> pa.Array:
    if isinstance(dtype, StringType):
        return _joined(_strings(keys), len(keys))
    if isinstance(dtype, BooleanType):
        return pc.if_else(keys, '"true"', '"false"')
    return _quoted(pc.cast(keys, pa.string()))


def json_fragments(arr: pa.Array, dtype: DataType) -> pa.Array:
    return _joined(json_parts(arr, dtype), len(arr))


def json_parts(arr: pa.Array, dtype: DataType) -> Parts:
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(dtype, NullType) or pa.types.is_null(arr.type):
        return [_NULL_TEXT]
    if isinstance(dtype, StringType):
        return _strings(arr)
    if isinstance(dtype, TimestampType | TimestampNTZType):
        return _timestamps(arr, utc=isinstance(dtype, TimestampType))
    if isinstance(dtype, DoubleType | FloatType):
        text = _floats(arr)
        return text if arr.null_count == 0 else [_finish(_joined(text, len(arr)), arr)]
    return [_fragments(arr, dtype)]


def _fragments(arr: pa.Array, dtype: DataType) -> pa.Array:
    if isinstance(dtype, (*INTEGRAL_TYPES, DecimalType)):
        return _finish(pc.cast(arr, pa.string()), arr)
    if isinstance(dtype, BooleanType):
        return _finish(pc.if_else(arr, "true", "false"), arr)
    if isinstance(dtype, BinaryType):
        return _per_value(arr, lambda v: '"' + binascii.b2a_base64(v, newline=False).decode() + '"')
    if isinstance(dtype, DateType):
        return _finish(_quoted(pc.strftime(arr, "%Y-%m-%d")), arr)
    if isinstance(dtype, DayTimeIntervalType):
        micros = pc.cast(pc.cast(arr, pa.duration("us")), pa.int64())
        start, end = dtype.startField, dtype.endField
        return _per_value(micros, lambda v: '"' + _interval(v, start, end) + '"')
    if isinstance(dtype, ArrayType):
        offsets, items = list_parts(arr)
        return _join_lists(offsets, json_fragments(items, dtype.elementType), arr, "[", "]")
    if isinstance(dtype, MapType):
        offsets, entries = list_parts(arr)
        keys, items = entries.field(0), entries.field(1)
        pairs = pc.binary_join_element_wise(
            _map_keys(keys, dtype.keyType), json_fragments(items, dtype.valueType), ":"
        )
        return _join_lists(offsets, pairs, arr, "{", "}")
    if isinstance(dtype, StructType):
        children = [arr.field(i) for i in range(arr.type.num_fields)]  # parent nulls handled below
        parts = [json_parts(c, f.dataType) for c, f in zip(children, dtype.fields, strict=True)]
        return _finish(json_object(dtype.names, parts, len(arr)), arr)
    raise TypeError(f"no JSON mapping for {dtype.simpleString()}")  # validate() rejects these on the driver


_UNITS_US = (86_400_000_000, 3_600_000_000, 60_000_000, 1_000_000)
_FIELD_NAMES = ("DAY", "HOUR", "MINUTE", "SECOND")


def _interval(micros: int, start: int, end: int) -> str:
    """Spark's ANSI literal (fields 0=DAY..3=SECOND): ``INTERVAL '1 02:03:04.000005' DAY TO SECOND``."""
    sign = "-" if micros < 0 else ""
    rest = abs(micros)
    parts: list[str] = []
    for field in range(start, end + 1):
        value, rest = divmod(rest, _UNITS_US[field])
        text = str(value) if field == 0 else f"{value:02d}"
        if field == 3 and rest:
            text += "." + f"{rest:06d}".rstrip("0")
        parts.append(text)
    body = parts[0]
    for field, text in zip(range(start + 1, end + 1), parts[1:], strict=True):
        body += (" " if field == 1 else ":") + text
    names = _FIELD_NAMES[start] if start == end else f"{_FIELD_NAMES[start]} TO {_FIELD_NAMES[end]}"
    return f"INTERVAL '{sign}{body}' {names}"


_LITERAL = re.compile(r"^INTERVAL '(-?)([0-9 :.]+)' (DAY|HOUR|MINUTE|SECOND)(?: TO (HOUR|MINUTE|SECOND))?$")


def parse_interval(text: str) -> dt.timedelta:
    """What `_interval` writes, read back."""
    match = _LITERAL.match(text)
    if match is None:
        raise ValueError(f"not a day-time interval literal: {text!r}")
    sign, body, start_name, end_name = match.groups()
    start = _FIELD_NAMES.index(start_name)
    micros = 0
    for field, part in zip(
        range(start, _FIELD_NAMES.index(end_name or start_name) + 1), re.split(r"[ :]", body), strict=True
    ):
        micros += int(Decimal(part) * 1_000_000) if field == 3 else int(part) * _UNITS_US[field]
    return dt.timedelta(microseconds=-micros if sign else micros)


_TIMESTAMP_WIDTH = len("2024-01-02 03:04:05.123456")
_DATE_TIME_SEPARATOR = len("2024-01-02")


def _timestamps(arr: pa.Array, *, utc: bool) -> Parts:
    # Arrow keeps instants in UTC: dropping the zone leaves the UTC wall clock, which a cast prints as
    # "YYYY-MM-DD HH:MM:SS.ffffff" for microseconds (far cheaper than strftime)
    if utc:
        arr = pc.cast(arr, pa.timestamp("us", "UTC"), safe=False)
    arr = pc.cast(arr, pa.timestamp("us"), safe=False)
    text = _t_separated(pc.cast(arr, pa.string()))
    close = 'Z"' if utc else '"'
    if arr.null_count == 0:
        return ['"', text, close]
    return [_finish(pc.binary_join_element_wise('"', text, close, ""), arr)]


def _t_separated(text: pa.Array) -> pa.Array:
    offsets = np.frombuffer(text.buffers()[1], np.int32, len(text) + 1, text.offset * 4)
    data = text.buffers()[2]
    if text.null_count or data is None or not (np.diff(offsets) == _TIMESTAMP_WIDTH).all():
        # years beyond 4 digits or null rows: no fixed layout to patch in place
        return pc.replace_substring(text, " ", "T", max_replacements=1)
    start = int(offsets[0])
    chars = np.frombuffer(data, np.uint8, len(text) * _TIMESTAMP_WIDTH, start).copy()
    chars.reshape(-1, _TIMESTAMP_WIDTH)[:, _DATE_TIME_SEPARATOR] = ord("T")
    fresh_offsets = np.arange(len(text) + 1, dtype=np.int32) * _TIMESTAMP_WIDTH
    return pa.Array.from_buffers(
        pa.string(), len(text), [None, pa.py_buffer(fresh_offsets), pa.py_buffer(chars)]
    )


def _joined(parts: Parts, length: int) -> pa.Array:
    merged: Parts = []
    for part in parts:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        elif not isinstance(part, str) or part:
            merged.append(part)
    arrays = [p for p in merged if isinstance(p, pa.Array)]
    if not arrays:
        return pa.repeat(pa.scalar("".join(str(p) for p in merged)), length)
    if len(merged) == 1:
        return arrays[0]
    return pc.binary_join_element_wise(*merged, "")


def json_objects(batch: pa.RecordBatch, schema: StructType, columns: Sequence[str]) -> pa.Array:
    return json_object(
        columns, [json_parts(batch.column(c), schema[c].dataType) for c in columns], len(batch)
    )


def json_object(names: Sequence[str], columns: Sequence[Parts | pa.Array], length: int) -> pa.Array:
    """Row-wise ``{"name":value,...}``, no spaces, Spark's field order."""
    if not names:
        return pa.repeat(pa.scalar("{}"), length)
    parts: Parts = []
    for i, (name, column) in enumerate(zip(names, columns, strict=True)):
        parts.append(("{" if i == 0 else ",") + json_string(name) + ":")
        parts.extend(column if isinstance(column, list) else [column])
    parts.append("}")
    return _joined(parts, length)
