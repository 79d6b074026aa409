"""The record-by-record conversion of read records into each ``s2.format``'s Arrow batch: the reference the
package's column path (`s2_sink._read.rows`) is tested and benchmarked against (its results and error
messages must be these).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import s2_sdk
from pyspark.sql.types import StructType

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink._read.read_options import ReadFormat
from s2_sink._read.rows.record_rows import decode_bodies
from s2_sink._read.rows.schemas import ACTION_COLUMN, META_COLUMNS, is_typed_upsert
from s2_sink._read.rows.upsert_rows import ACTION_HEADER, KEY_HEADER
from s2_sink._wire.columns import RecordColumns, to_target
from s2_sink.encoders._arrow_types import to_arrow_schema
from s2_sink.encoders._kafka import KAFKA_KEY_HEADER
from s2_sink.errors import ReadError

__all__ = ["materialize", "records_to_batch", "to_records"]


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
    return to_target(arrays, to_arrow_schema(schema))


def to_records(columns: RecordColumns) -> list[s2_sdk.SequencedRecord]:
    """The SDK's records of the columns, one by one."""
    offsets = columns.header_offsets.tolist()
    names, values = columns.names.to_pylist(), columns.values.to_pylist()
    seqs, stamps, bodies = columns.seq_nums.tolist(), columns.timestamps.tolist(), columns.bodies.to_pylist()
    return [
        s2_sdk.SequencedRecord(
            seq_num=seqs[i],
            body=bodies[i],
            headers=list(
                zip(names[offsets[i] : offsets[i + 1]], values[offsets[i] : offsets[i + 1]], strict=True)
            ),
            timestamp=stamps[i],
        )
        for i in range(len(seqs))
    ]
