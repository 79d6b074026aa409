"""Arrow columns → JSON text, column by column (the Python twin of Spark's ``to_json``).

Every function returns a string array holding, for each row, the JSON text of that row's value (``null`` for
nulls), so a JSON object is one element-wise concatenation of literal field names and value fragments. Work is
done by Arrow kernels; only types without a kernel (floats, binary, day-time intervals, rare decimals, strings
with control characters) fall back to a per-value Python function.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

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

from s2_sink.encoders._java_text import java_decimal, java_double, java_float, java_interval
from s2_sink.encoders._lists import list_parts
from s2_sink.encoders._types import INTEGRAL_TYPES

__all__ = ["json_fragments", "json_object", "json_string"]

_NULL = pa.scalar("null")
_CONTROL = "[\x00-\x1f]"
_SPECIAL = '[\x00-\x1f"\\\\]'
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
    """One Python string as JSON text, escaped as Jackson (and so Spark's ``to_json``) escapes it."""
    return '"' + text.translate(_ESCAPES) + '"'


def _per_value(arr: pa.Array, fn: Callable[[Any], str]) -> pa.Array:
    return pa.array([_NULL_TEXT if v is None else fn(v) for v in arr.to_pylist()], pa.string())


_NULL_TEXT = "null"


def _finish(text: pa.Array, arr: pa.Array) -> pa.Array:
    """Null rows of ``arr`` become the text ``null``."""
    if arr.null_count == 0:
        return text
    return pc.if_else(pc.is_valid(arr), text, _NULL)


def _strings(arr: pa.Array) -> pa.Array:
    arr = arr.cast(pa.string()) if not pa.types.is_string(arr.type) else arr
    special = pc.match_substring_regex(arr, _SPECIAL)
    if not pc.any(special).as_py():  # the common case: nothing to escape
        return _finish(pc.binary_join_element_wise('"', arr, '"', ""), arr)
    escaped = pc.replace_substring(pc.replace_substring(arr, "\\", "\\\\"), '"', '\\"')
    quoted = pc.binary_join_element_wise('"', escaped, '"', "")
    has_control = pc.match_substring_regex(arr, _CONTROL)
    if pc.any(has_control).as_py():  # rare: redo just those rows with the exact Jackson escapes
        fixed = pa.array(
            [
                json_string(v) if c else None
                for v, c in zip(arr.to_pylist(), has_control.to_pylist(), strict=True)
            ],
            pa.string(),
        )
        quoted = pc.if_else(pc.fill_null(has_control, False), fixed, quoted)
    return _finish(quoted, arr)


def _floats(arr: pa.Array, fallback: Callable[[Any], str]) -> pa.Array:
    """Arrow's shortest text equals Java's for 1e-3 <= |x| < 1e7 (plus Java's ".0"); others go per value."""
    magnitude = pc.abs(arr)
    plain = pc.fill_null(pc.and_(pc.greater_equal(magnitude, 1e-3), pc.less(magnitude, 1e7)), True)
    text = pc.cast(arr, pa.string())
    text = pc.if_else(pc.match_substring(text, "."), text, pc.binary_join_element_wise(text, ".0", ""))
    if not pc.all(plain).as_py():
        others = _per_value(pc.if_else(plain, pa.scalar(None, arr.type), arr), fallback)
        text = pc.if_else(plain, text, others)
    return _finish(text, arr)


def _decimals(arr: pa.Array, scale: int) -> pa.Array:
    text = pc.cast(arr, pa.string())
    if scale > 6:  # BigDecimal.toString switches to E-notation below 1e-6 (zero included): redo those rows
        tiny = pc.less(pc.abs(arr), pa.scalar(Decimal("0.000001"), arr.type))
        if pc.any(tiny).as_py():
            redone = _per_value(pc.if_else(tiny, arr, pa.scalar(None, arr.type)), java_decimal)
            text = pc.if_else(pc.fill_null(tiny, False), redone, text)
    return _finish(text, arr)


def _join_lists(offsets: pa.Array, fragments: pa.Array, arr: pa.Array, open_: str, close: str) -> pa.Array:
    lists = pa.ListArray.from_arrays(offsets, fragments, mask=arr.is_null() if arr.null_count else None)
    joined = pc.binary_join(lists, ",")
    return _finish(pc.binary_join_element_wise(open_, pc.fill_null(joined, ""), close, ""), arr)


def _map_keys(keys: pa.Array, dtype: DataType) -> pa.Array:
    if isinstance(dtype, StringType):
        return _strings(keys)
    if isinstance(dtype, BooleanType):
        return pc.if_else(keys, '"true"', '"false"')
    return pc.binary_join_element_wise('"', pc.cast(keys, pa.string()), '"', "")


def json_fragments(arr: pa.Array, dtype: DataType) -> pa.Array:
    """The JSON text of every value of ``arr`` (an Arrow column of Spark type ``dtype``) as a string array."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if isinstance(dtype, NullType) or pa.types.is_null(arr.type):
        return pa.array([_NULL_TEXT] * len(arr), pa.string())
    if isinstance(dtype, StringType):
        return _strings(arr)
    if isinstance(dtype, INTEGRAL_TYPES):
        return _finish(pc.cast(arr, pa.string()), arr)
    if isinstance(dtype, BooleanType):
        return _finish(pc.if_else(arr, "true", "false"), arr)
    if isinstance(dtype, DoubleType):
        return _floats(arr, java_double)
    if isinstance(dtype, FloatType):
        return _floats(arr, java_float)
    if isinstance(dtype, DecimalType):
        return _decimals(arr, dtype.scale)
    if isinstance(dtype, BinaryType):
        return _per_value(arr, lambda b: '"' + base64.b64encode(b).decode("ascii") + '"')
    if isinstance(dtype, DateType):
        return _finish(pc.binary_join_element_wise('"', pc.strftime(arr, "%Y-%m-%d"), '"', ""), arr)
    if isinstance(dtype, TimestampType | TimestampNTZType):
        return _timestamps(arr, utc=isinstance(dtype, TimestampType))
    if isinstance(dtype, DayTimeIntervalType):
        micros = pc.cast(pc.cast(arr, pa.duration("us")), pa.int64())
        start, end = dtype.startField, dtype.endField
        return _per_value(micros, lambda v: json_string(java_interval(v, start, end)))
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
        frags = [json_fragments(c, f.dataType) for c, f in zip(children, dtype.fields, strict=True)]
        obj = json_object(dtype.names, frags, len(arr))
        return _finish(obj, arr)
    raise TypeError(f"no JSON mapping for {dtype.simpleString()}")  # validate() rejects these on the driver


def _timestamps(arr: pa.Array, *, utc: bool) -> pa.Array:
    # Arrow keeps instants in UTC: dropping the zone leaves the UTC wall clock, which a cast prints as
    # "YYYY-MM-DD HH:MM:SS.ffffff" for microseconds (far cheaper than strftime)
    if utc:
        arr = pc.cast(arr, pa.timestamp("us", "UTC"), safe=False)
    arr = pc.cast(arr, pa.timestamp("us"), safe=False)
    text = pc.replace_substring(pc.cast(arr, pa.string()), " ", "T", max_replacements=1)
    return _finish(pc.binary_join_element_wise('"', text, 'Z"' if utc else '"', ""), arr)


def json_object(names: Sequence[str], fragments: Sequence[pa.Array], length: int | None = None) -> pa.Array:
    """Row-wise ``{"name":fragment,...}`` from per-column JSON fragments (no spaces, Spark's field order).

    ``length`` is only needed when there are no columns (every row is then ``{}``).
    """
    if not names:
        return pa.array(["{}"] * (length or 0), pa.string())
    parts: list[pa.Array | str] = []
    for i, (name, frag) in enumerate(zip(names, fragments, strict=True)):
        parts.append(("{" if i == 0 else ",") + json_string(name) + ":")
        parts.append(frag)
    parts.append("}")
    return pc.binary_join_element_wise(*parts, "")
