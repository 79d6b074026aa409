"""The rows of ``s2.format=raw``, ``kafka`` and ``json`` from record columns, and JSON bodies decoded into a
schema's columns (json's rows, and typed upsert's over the spliced key and value).

Kafka's ``key`` is the first ``@kafka-key`` header (`encoders.KafkaEncoder` writes it first); its ``headers``
leave it and every ``@s2sink`` chunk tag out (written back, a tag would claim a foreign chunk).

Arrow's JSON reader decodes the bodies in bulk only where its result is provably the record-by-record
decoder's (`decode_bodies_bulk`: some column types, one ``{...}`` per line, no ``NaN``; no integer ``-0``
with a double column, which Arrow reads as -0.0 and Spark as 0.0; timestamps in the one shape both parse
alike); any error it raises sends the bodies to that decoder, which names the record and the field.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.json as pj
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DoubleType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink._read.rows.schemas import ACTION_COLUMN, META_COLUMNS
from s2_sink._wire.columns import (
    Bytes,
    RecordColumns,
    StreamRuns,
    binary_view,
    call,
    cast,
    entry_owners,
    first_header,
    headers_column,
    int32_array,
    named,
    rows_batch,
    take,
    take_or_null,
    utf8_text,
    valid_rows,
)
from s2_sink.encoders import decode_json
from s2_sink.encoders._arrow_types import to_arrow_schema
from s2_sink.encoders._kafka import KAFKA_KEY_HEADER
from s2_sink.errors import EncodeError, ReadError

__all__ = [
    "decode_bodies",
    "decode_bodies_bulk",
    "decoded_batch",
    "json_batch",
    "kafka_batch",
    "raw_batch",
    "timestamps_shaped",
]


def raw_batch(
    schema: StructType, stream: str | StreamRuns, columns: RecordColumns, target: pa.Schema
) -> pa.RecordBatch:
    return rows_batch(
        target, stream, columns, {"headers": lambda: headers_column(columns), "body": lambda: columns.bodies}
    )


def kafka_batch(
    schema: StructType, stream: str | StreamRuns, columns: RecordColumns, target: pa.Schema
) -> pa.RecordBatch:
    from_record = {
        "value": lambda: columns.bodies,
        "key": lambda: take_or_null(columns.values, first_header(columns, KAFKA_KEY_HEADER)),
        "headers": lambda: _user_headers(columns),
    }
    return rows_batch(target, stream, columns, from_record)


def _user_headers(columns: RecordColumns) -> pa.Array:
    owners = entry_owners(columns)
    keep = ~named(columns, TAG_HEADER)
    key = first_header(columns, KAFKA_KEY_HEADER, owners)
    keep[key[key >= 0]] = False
    kept = np.flatnonzero(keep)
    offsets = np.zeros(len(columns) + 1, dtype=np.int32)
    np.cumsum(np.bincount(owners[kept], minlength=len(columns)), out=offsets[1:])
    entries = pa.StructArray.from_arrays(
        [utf8_text(take(columns.names, kept)), take(columns.values, kept)], names=["key", "value"]
    )
    return pa.ListArray.from_arrays(int32_array(offsets), entries)


def json_batch(
    schema: StructType, stream: str | StreamRuns, columns: RecordColumns, target: pa.Schema
) -> pa.RecordBatch:
    return decoded_batch(schema, stream, columns, columns.bodies, target)


def decoded_batch(
    schema: StructType,
    stream: str | StreamRuns,
    columns: RecordColumns,
    bodies: pa.Array,
    target: pa.Schema,
    *,
    action: pa.Array | None = None,
) -> pa.RecordBatch:
    """Rows of ``schema`` decoded from ``bodies`` (one JSON object per record), its `META_COLUMNS` from the
    records' positions and its `ACTION_COLUMN` from ``action`` (typed upsert's)."""
    special = {*META_COLUMNS, ACTION_COLUMN}
    data_schema = StructType([f for f in schema.fields if f.name not in special])
    data_target = pa.schema([target.field(f.name) for f in data_schema.fields])
    decoded = decode_bodies_bulk(bodies, data_schema, where=f"stream {stream!r}", target=data_target)
    made: dict[str, Callable[[], pa.Array]] = {
        n: functools.partial(decoded.column, n) for n in data_target.names
    }
    if action is not None:
        made[ACTION_COLUMN] = lambda: action
    return rows_batch(target, stream, columns, made)


_BULK_TYPES: Final = (
    StringType,
    LongType,
    IntegerType,
    ShortType,
    ByteType,
    BooleanType,
    DoubleType,
    TimestampType,
)
_TIMESTAMP_SHAPE: Final = (
    r"^(1[0-9]|[2-8][0-9])[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?"
    r"(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
"""The timestamp texts read in bulk, as a regular expression (`timestamps_shaped` checks it)."""
_NON_FINITE: Final = (b"NaN", b"Infinity")
_OPEN, _CLOSE, _LF, _CR = ord("{"), ord("}"), ord("\n"), ord("\r")
_MINUS, _ZERO = ord("-"), ord("0")
_NUMBER_GOES_ON: Final = np.frombuffer(b".eE0123456789", dtype=np.uint8)
"""The bytes after ``-0`` that make it no integer ``-0`` (a fraction, an exponent; a digit: not JSON)."""
_NEWLINE: Final = pa.Array.from_buffers(
    pa.binary(), 1, [None, pa.py_buffer(np.array([0, 1], dtype=np.int32)), pa.py_buffer(b"\n")]
)
"""The separator of `_joined`, as a one-value binary array (``pa.scalar`` would import pandas)."""


def decode_bodies(bodies: Sequence[bytes], schema: StructType, *, where: str) -> pa.RecordBatch:
    try:
        return decode_json(bodies, schema)
    except EncodeError as exc:
        raise ReadError(f"s2 source: a record of {where} does not decode into the schema: {exc}") from exc


def decode_bodies_bulk(
    bodies: pa.Array, schema: StructType, *, where: str, target: pa.Schema | None = None
) -> pa.RecordBatch:
    """The JSON object ``bodies`` decoded into ``schema``'s columns: by Arrow where that is provably the
    record-by-record decoder's result, else by that decoder."""
    bulk = all(isinstance(f.dataType, _BULK_TYPES) for f in schema.fields)
    decoded = _arrow_read(bodies, to_arrow_schema(schema) if target is None else target) if bulk else None
    if decoded is None:
        return decode_bodies(bodies.to_pylist(), schema, where=where)
    return decoded


def _joined(bodies: pa.Array, *, doubles: bool) -> pa.Buffer | None:
    """The bodies as newline-delimited JSON, or None if they are not all single-line ``{...}`` texts or hold a
    token Arrow reads otherwise."""
    offsets, data = binary_view(bodies)
    lengths = np.diff(offsets)
    if (lengths < 2).any():
        return None
    span = data[int(offsets[0]) : int(offsets[-1])]
    if (data[offsets[:-1]] != _OPEN).any() or (data[offsets[1:] - 1] != _CLOSE).any():
        return None
    if (span == _LF).any() or (span == _CR).any():
        return None
    try:
        str(span.data, "utf-8")
    except UnicodeDecodeError:
        return None
    if _holds_non_finite(span) or (doubles and _holds_integer_minus_zero(span)):
        return None
    # One list of all the bodies, joined by Arrow with a newline between them (one copy, in C++).
    one_list = pa.ListArray.from_arrays(int32_array(np.array([0, len(bodies)], dtype=np.int32)), bodies)
    joined: pa.Array = call("binary_join", [one_list, _NEWLINE])
    buffer: pa.Buffer = joined.buffers()[2]
    return buffer


def _holds_non_finite(data: Bytes) -> bool:
    for token in _NON_FINITE:
        at = np.flatnonzero(data[: max(len(data) - len(token) + 1, 0)] == token[0])
        for k in range(1, len(token)):
            at = at[data[at + k] == token[k]]
        if at.size:
            return True
    return False


def _holds_integer_minus_zero(data: Bytes) -> bool:
    """Whether ``-0`` not followed by ``.``, ``e``, ``E`` or a digit occurs in ``data`` (which ends with
    ``}``)."""
    at = np.flatnonzero(data[:-2] == _MINUS)
    at = at[data[at + 1] == _ZERO]
    return bool(at.size) and not np.isin(data[at + 2], _NUMBER_GOES_ON).all()


def _arrow_read(bodies: pa.Array, target: pa.Schema) -> pa.RecordBatch | None:
    if len(bodies) == 0 or bodies.null_count:
        return None
    joined = _joined(bodies, doubles=any(pa.types.is_floating(f.type) for f in target))
    if joined is None:
        return None
    read_as = pa.schema(
        [pa.field(f.name, pa.string()) if pa.types.is_timestamp(f.type) else f for f in target]
    )
    try:
        table = pj.read_json(
            pa.BufferReader(joined),
            read_options=pj.ReadOptions(use_threads=False, block_size=joined.size + 1),
            parse_options=pj.ParseOptions(
                explicit_schema=read_as, unexpected_field_behavior="ignore", newlines_in_values=False
            ),
        )
        if table.num_rows != len(bodies):
            return None
        columns = []
        for field in target:
            column = table.column(field.name).combine_chunks()
            if pa.types.is_timestamp(field.type):
                if not timestamps_shaped(column):
                    return None
                column = cast(column, field.type)
            columns.append(column)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    return pa.RecordBatch.from_arrays(columns, schema=target)


_DIGIT: Final = (ord("0"), ord("9"))
# The fixed part, ``YYYY-MM-DDTHH:MM:SS``: (lowest, highest) byte at each position (years 1000-8999).
_DATE_TIME: Final = (
    (ord("1"), ord("8")), _DIGIT, _DIGIT, _DIGIT, (ord("-"),) * 2, _DIGIT, _DIGIT, (ord("-"),) * 2,
    _DIGIT, _DIGIT, (ord("T"),) * 2, _DIGIT, _DIGIT, (ord(":"),) * 2, _DIGIT, _DIGIT, (ord(":"),) * 2,
    _DIGIT, _DIGIT,
)  # fmt: skip
_OFFSET: Final = (
    (ord("+"), ord("-")),
    (ord("0"), ord("2")),
    _DIGIT,
    (ord(":"),) * 2,
    (ord("0"), ord("5")),
    _DIGIT,
)
_BASE = len(_DATE_TIME)
_SHORTEST, _LONGEST = _BASE + 1, _BASE + 7 + 6  # YYYY-MM-DDTHH:MM:SSZ, ...SS.ffffff+HH:MM


def _bounds(length: int, zone: int) -> tuple[Bytes, Bytes] | None:
    """Per-position (lowest, highest) bytes of the texts of ``length`` bytes whose zone part is ``zone`` bytes
    (1: ``Z``, 6: ``+HH:MM``), or None if none has the shape."""
    fraction = length - _BASE - zone  # "" or "." and 1 to 6 digits
    if fraction < 0 or fraction == 1 or fraction > 7:
        return None
    zone_part = ((ord("Z"),) * 2,) if zone == 1 else _OFFSET
    dot = ((ord("."),) * 2,) if fraction else ()
    spans = (*_DATE_TIME, *dot, *(_DIGIT,) * max(fraction - 1, 0), *zone_part)
    lows = np.array([lo for lo, _ in spans], dtype=np.uint8)
    highs = np.array([hi for _, hi in spans], dtype=np.uint8)
    return lows, highs


def _shaped(texts: Bytes, zone: int) -> npt.NDArray[np.bool_]:
    bounds = _bounds(texts.shape[1], zone)
    if bounds is None:
        return np.zeros(len(texts), dtype=np.bool_)
    lows, highs = bounds
    ok: npt.NDArray[np.bool_] = np.asarray(((texts >= lows) & (texts <= highs)).all(axis=1))
    if zone == 6:
        sign, hour, hour_low = texts[:, -6], texts[:, -5], texts[:, -4]
        ok &= (sign == ord("+")) | (sign == ord("-"))  # not "," between them
        ok &= (hour != ord("2")) | (hour_low <= ord("3"))  # hours 00-23
    return ok


def timestamps_shaped(column: pa.Array) -> bool:
    """Whether every non-null text of ``column`` matches `_TIMESTAMP_SHAPE`, checked with numpy position by
    position per text length (a regular expression costs more than Arrow's whole JSON parse)."""
    offsets, data = binary_view(column)
    lengths = np.diff(offsets)
    rows = np.flatnonzero(valid_rows(column))
    if not rows.size:
        return True
    row_lengths = lengths[rows]
    if row_lengths.min() < _SHORTEST or row_lengths.max() > _LONGEST:
        return False
    # (np.unique would import numpy.ma, a hundredth of a second in a fresh worker.)
    for length in np.flatnonzero(np.bincount(row_lengths)).tolist():
        at = rows[row_lengths == length]
        if len(at) == len(lengths):  # every row, all of one length: the texts are one block, viewed as rows
            texts = data[int(offsets[0]) : int(offsets[-1])].reshape(len(at), length)
        else:
            texts = data[offsets[at][:, None] + np.arange(length)]
        ends_z = texts[:, -1] == ord("Z")
        if ends_z.all():  # the usual case: one zone form only, checked once
            ok = _shaped(texts, 1)
        elif not ends_z.any():
            ok = _shaped(texts, 6)
        else:
            ok = np.where(ends_z, _shaped(texts, 1), _shaped(texts, 6))
        if not ok.all():
            return False
    return True
