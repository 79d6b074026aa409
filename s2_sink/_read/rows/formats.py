"""Output schemas of the s2 source and the conversion of read records into Arrow batches.

- ``raw``: ``stream, seq_num, timestamp, headers, body`` (a user schema may select a subset of these columns).
- ``json``: the user schema, decoded from the record bodies; columns named ``_s2_stream``, ``_s2_seq_num`` and
  ``_s2_timestamp`` are filled from the record's position instead of its body.
- ``kafka``: ``stream, seq_num, timestamp, key, value, headers``, Kafka's column names and types: the key
  from the ``@kafka-key`` header (null without one), which ``headers`` then leaves out (see
  ``encoders._kafka``), as it leaves out the exactly-once chunk tag ``@s2sink``.
- ``upsert``: ``stream, seq_num, timestamp, key, action, value`` (``@key`` / ``@action`` headers and the
  body as text). With a user schema, the columns are decoded from the key JSON merged with the value JSON,
  and a column named ``_s2_action`` receives ``u`` / ``d``. ``s2.upsert-materialize`` keeps each key's
  latest change, when it is an update, in seq_num order.

Reads build every format from record columns (`columns_to_batch`, `materialized_batches`) with Arrow and
numpy kernels over all records at once (`kafka_columns`, `upsert_columns`). `records_to_batch` and
`materialize` are the same conversions spelled out one SDK record at a time: the reference the column
path is tested against (its results and error messages must be theirs), not used by reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import s2_sdk
from pyspark.sql.types import (
    StructType,
)

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink._read.read_options import ReadFormat
from s2_sink._read.rows.json_columns import decode_bodies, decode_bodies_bulk
from s2_sink._read.rows.kafka_columns import KAFKA_RECORD_COLUMNS, kafka_column
from s2_sink._read.rows.schemas import (
    ACTION_COLUMN,
    KAFKA_SCHEMA,
    META_COLUMNS,
    RAW_SCHEMA,
    UPSERT_SCHEMA,
    check_schema,
    default_schema,
    is_typed_upsert,
)
from s2_sink._read.rows.upsert_columns import (
    ACTION_HEADER,
    KEY_HEADER,
    UPSERT_RECORD_COLUMNS,
    changes,
    latest_changes,
    merged_bodies,
    upsert_column,
)
from s2_sink._wire.arrow_arrays import call, cast, int32_array, repeated, uint64_array
from s2_sink._wire.read.record_columns import RecordColumns, concat_columns
from s2_sink.encoders._arrow_types import to_arrow_schema
from s2_sink.encoders._kafka import KAFKA_KEY_HEADER
from s2_sink.errors import ReadError

__all__ = [
    "KAFKA_SCHEMA",
    "META_COLUMNS",
    "RAW_SCHEMA",
    "UPSERT_SCHEMA",
    "check_schema",
    "columns_to_batch",
    "default_schema",
    "materialize",
    "materialized_batches",
    "records_to_batch",
    "several_to_batch",
]


def _ts_array(records: Sequence[s2_sdk.SequencedRecord]) -> pa.Array:
    return pa.array([r.timestamp * 1000 for r in records], type=pa.timestamp("us", tz="UTC"))


def _meta_array(name: str, stream: str, records: Sequence[s2_sdk.SequencedRecord]) -> pa.Array:
    if name in ("stream", "_s2_stream"):
        return pa.array([stream] * len(records), type=pa.string())
    if name in ("seq_num", "_s2_seq_num"):
        return pa.array([r.seq_num for r in records], type=pa.int64())
    return _ts_array(records)


def _header(record: s2_sdk.SequencedRecord, name: bytes) -> bytes | None:
    for key, value in record.headers:
        if key == name:
            return value
    return None


def _upsert_parts(stream: str, record: s2_sdk.SequencedRecord) -> tuple[bytes, str]:
    key = _header(record, KEY_HEADER)
    action = _header(record, ACTION_HEADER)
    if key is None or action not in (b"u", b"d"):
        raise ReadError(
            f"s2.format=upsert: record {record.seq_num} of stream {stream!r} has no @key header or no "
            f"@action header of 'u' or 'd' (headers {[k for k, _ in record.headers]!r})"
        )
    return key, action.decode()


def materialize(stream: str, records: Sequence[s2_sdk.SequencedRecord]) -> list[s2_sdk.SequencedRecord]:
    """The latest update per key with deletes applied, in seq_num order of the surviving records."""
    latest: dict[bytes, s2_sdk.SequencedRecord] = {}
    for record in records:
        key, action = _upsert_parts(stream, record)
        latest.pop(key, None)
        if action == "u":
            latest[key] = record
    return sorted(latest.values(), key=lambda r: r.seq_num)


def _raw_columns(
    schema: StructType, stream: str, records: Sequence[s2_sdk.SequencedRecord]
) -> list[pa.Array]:
    arrays: list[pa.Array] = []
    for f in schema.fields:
        if f.name == "headers":
            arrays.append(pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records]))
        elif f.name == "body":
            arrays.append(pa.array([r.body for r in records], type=pa.binary()))
        else:
            arrays.append(_meta_array(f.name, stream, records))
    return arrays


def _kafka_columns(
    schema: StructType, stream: str, records: Sequence[s2_sdk.SequencedRecord]
) -> list[pa.Array]:
    arrays: list[pa.Array] = []
    for f in schema.fields:
        if f.name == "key":
            arrays.append(pa.array([_header(r, KAFKA_KEY_HEADER) for r in records], type=pa.binary()))
        elif f.name == "value":
            arrays.append(pa.array([r.body for r in records], type=pa.binary()))
        elif f.name == "headers":
            # Only the first key header is the key (the one the encoder put first); later ones stay. The
            # exactly-once chunk tag is the sink's bookkeeping: written back, it would claim a foreign chunk.
            own = [_without_first(r.headers, KAFKA_KEY_HEADER) for r in records]
            own = [[(k, v) for k, v in h if k != TAG_HEADER] for h in own]
            arrays.append(pa.array([[{"key": _text(k), "value": v} for k, v in h] for h in own]))
        else:
            arrays.append(_meta_array(f.name, stream, records))
    return arrays


def _without_first(headers: Sequence[tuple[bytes, bytes]], name: bytes) -> list[tuple[bytes, bytes]]:
    out = list(headers)
    for i, (key, _) in enumerate(out):
        if key == name:
            del out[i]
            break
    return out


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="replace")


def _upsert_columns(
    schema: StructType, stream: str, records: Sequence[s2_sdk.SequencedRecord]
) -> list[pa.Array]:
    parts = [_upsert_parts(stream, r) for r in records]
    arrays: list[pa.Array] = []
    for f in schema.fields:
        if f.name == "key":
            arrays.append(pa.array([_text(k) for k, _ in parts], type=pa.string()))
        elif f.name == "action":
            arrays.append(pa.array([a for _, a in parts], type=pa.string()))
        elif f.name == "value":
            values = [None if a == "d" else _text(r.body) for r, (_, a) in zip(records, parts, strict=True)]
            arrays.append(pa.array(values, type=pa.string()))
        else:
            arrays.append(_meta_array(f.name, stream, records))
    return arrays


def _splice(key: bytes, value: bytes) -> bytes | None:
    """``{key fields}`` + ``{value fields}`` as one JSON object, spliced as text (numbers keep digits)."""
    k, v = key.strip(), value.strip()
    if not (k.startswith(b"{") and k.endswith(b"}") and v.startswith(b"{") and v.endswith(b"}")):
        return None
    k_inner, v_inner = k[1:-1].strip(), v[1:-1].strip()
    if not k_inner or not v_inner:
        return b"{" + (k_inner or v_inner) + b"}"
    return b"{" + k_inner + b"," + v_inner + b"}"


def _merged_upsert_bodies(stream: str, records: Sequence[s2_sdk.SequencedRecord]) -> list[bytes]:
    bodies: list[bytes] = []
    for record in records:
        key, action = _upsert_parts(stream, record)
        merged = _splice(key, record.body if action == "u" and record.body else b"{}")
        if merged is None:
            raise ReadError(
                f"s2.format=upsert: record {record.seq_num} of stream {stream!r} has a key or value that is "
                "not a JSON object"
            )
        bodies.append(merged)
    return bodies


def _decoded_columns(
    fmt: ReadFormat, schema: StructType, stream: str, records: Sequence[s2_sdk.SequencedRecord]
) -> list[pa.Array]:
    special = {*META_COLUMNS, ACTION_COLUMN}
    data_schema = StructType([f for f in schema.fields if f.name not in special])
    bodies = _merged_upsert_bodies(stream, records) if fmt == "upsert" else [r.body for r in records]
    decoded = decode_bodies(bodies, data_schema, where=f"stream {stream!r}")
    arrays: list[pa.Array] = []
    for f in schema.fields:
        if f.name == ACTION_COLUMN:
            arrays.append(pa.array([_upsert_parts(stream, r)[1] for r in records], type=pa.string()))
        elif f.name in META_COLUMNS:
            arrays.append(_meta_array(f.name, stream, records))
        else:
            arrays.append(decoded.column(f.name))
    return arrays


def _to_target(schema: StructType, arrays: list[pa.Array]) -> pa.RecordBatch:
    target: pa.Schema = to_arrow_schema(schema)
    typed = [
        cast(arr, field.type) if arr.type != field.type else arr
        for arr, field in zip(arrays, target, strict=True)
    ]
    return pa.RecordBatch.from_arrays(typed, schema=target)


class StreamRuns(NamedTuple):
    """Whose records a batch of several streams holds: ``(stream, records)`` runs, in record order."""

    runs: tuple[tuple[str, int], ...]

    def __repr__(self) -> str:
        return ", ".join(repr(stream) for stream, _ in self.runs)


def _stream_column(stream: str | StreamRuns, count: int) -> pa.Array:
    if isinstance(stream, str):
        return repeated(stream.encode(), count, pa.string())
    names = [name.encode() for name, _ in stream.runs]
    counts = np.array([n for _, n in stream.runs], dtype=np.int64)
    offsets = np.zeros(count + 1, dtype=np.int32)
    np.cumsum(np.repeat(np.array([len(b) for b in names], dtype=np.int32), counts), out=offsets[1:])
    data = b"".join(name * int(n) for name, n in zip(names, counts, strict=True))
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _meta_column(name: str, stream: str | StreamRuns, columns: RecordColumns) -> pa.Array:
    # Arrays from buffers and kernels called directly: pa.array / pa.scalar would import pandas.
    if name in ("stream", "_s2_stream"):
        return _stream_column(stream, len(columns))
    if name in ("seq_num", "_s2_seq_num"):
        return cast(uint64_array(columns.seq_nums), pa.int64())
    # Checked arithmetic and casts: a timestamp past what Spark holds fails, as on the record path.
    thousand = uint64_array(np.full(len(columns), 1000, dtype=np.uint64))
    micros = call("multiply_checked", [uint64_array(columns.timestamps), thousand])
    return cast(cast(micros, pa.int64()), pa.timestamp("us", tz="UTC"))


def _headers_column(columns: RecordColumns) -> pa.Array:
    entries = pa.StructArray.from_arrays([columns.names, columns.values], names=["key", "value"])
    return pa.ListArray.from_arrays(int32_array(columns.header_offsets), entries)


def columns_to_batch(
    fmt: ReadFormat, schema: StructType, stream: str | StreamRuns, columns: RecordColumns
) -> pa.RecordBatch:
    """One Arrow batch in exactly ``schema``'s Arrow types, from record columns (as `records_to_batch`
    gives from the same records) of one stream, or of several one after the other (`StreamRuns`: errors
    then name them all; `several_to_batch` names the one)."""
    if fmt == "raw":
        raw = [
            _headers_column(columns)
            if f.name == "headers"
            else columns.bodies
            if f.name == "body"
            else _meta_column(f.name, stream, columns)
            for f in schema.fields
        ]
        return _to_target(schema, raw)
    if fmt == "kafka":
        kafka = [
            kafka_column(f.name, columns)
            if f.name in KAFKA_RECORD_COLUMNS
            else _meta_column(f.name, stream, columns)
            for f in schema.fields
        ]
        return _to_target(schema, kafka)
    if fmt == "upsert" and not is_typed_upsert(schema):
        found = changes(str(stream) if isinstance(stream, str) else repr(stream), columns)
        upsert = [
            upsert_column(f.name, found, columns)
            if f.name in UPSERT_RECORD_COLUMNS
            else _meta_column(f.name, stream, columns)
            for f in schema.fields
        ]
        return _to_target(schema, upsert)
    special = {*META_COLUMNS, ACTION_COLUMN}
    data_schema = StructType([f for f in schema.fields if f.name not in special])
    action: pa.Array | None = None
    if fmt == "upsert":
        bodies, found = merged_bodies(str(stream) if isinstance(stream, str) else repr(stream), columns)
        action = upsert_column("action", found, columns)
    else:
        bodies = columns.bodies
    decoded = decode_bodies_bulk(bodies, data_schema, where=f"stream {stream!r}")
    arrays = [
        action
        if f.name == ACTION_COLUMN and action is not None
        else _meta_column(f.name, stream, columns)
        if f.name in META_COLUMNS
        else decoded.column(f.name)
        for f in schema.fields
    ]
    return _to_target(schema, arrays)


def several_to_batch(
    fmt: ReadFormat, schema: StructType, parts: Sequence[tuple[str, RecordColumns]]
) -> pa.RecordBatch:
    """One Arrow batch of the records of several streams (`columns_to_batch` of them one after the other),
    converted together: a conversion costs Arrow calls whatever its length. A record that fails to convert
    fails as in its own stream's batch, naming that stream."""
    if len(parts) == 1:
        return columns_to_batch(fmt, schema, *parts[0])
    runs = StreamRuns(tuple((stream, len(columns)) for stream, columns in parts))
    try:
        return columns_to_batch(fmt, schema, runs, concat_columns([columns for _, columns in parts]))
    except ReadError:
        for stream, columns in parts:  # the failing stream's own error, naming it
            columns_to_batch(fmt, schema, stream, columns)
        raise


def materialized_batches(
    fmt: ReadFormat, schema: StructType, stream: str, parts: Iterable[RecordColumns], *, rows: int = 1000
) -> Iterator[pa.RecordBatch]:
    """The upsert batches of each key's latest change among the data records of ``parts`` (one stream's
    records in order, command records included), ``rows`` records a batch (as `materialize` picks)."""
    data = [p.take(~commands) if (commands := p.commands()).any() else p for p in parts]
    for latest in latest_changes(stream, data, rows):
        yield columns_to_batch(fmt, schema, stream, latest)


def records_to_batch(
    fmt: ReadFormat, schema: StructType, stream: str, records: Sequence[s2_sdk.SequencedRecord]
) -> pa.RecordBatch:
    """One Arrow batch in exactly ``schema``'s Arrow types (Spark checks names and then reads the types)."""
    if fmt == "raw":
        arrays = _raw_columns(schema, stream, records)
    elif fmt == "kafka":
        arrays = _kafka_columns(schema, stream, records)
    elif fmt == "upsert" and not is_typed_upsert(schema):
        arrays = _upsert_columns(schema, stream, records)
    else:
        arrays = _decoded_columns(fmt, schema, stream, records)
    return _to_target(schema, arrays)
