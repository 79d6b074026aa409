"""The record frame: the columnar shape every encoder produces and the writer consumes.

One row of the frame is one S2 record (or one row that cannot become a record, see ``_s2_error``):

    _s2_body       binary, not null                        the record body
    _s2_headers    array<struct<name:binary,value:binary>> null = no headers
    _s2_timestamp  long, ms since the epoch                null = let S2 assign it
    _s2_key        binary                                  routing key (upsert ``@key`` JSON, raw ``key``)
    _s2_error      string                                  non-null = this row cannot be encoded, and why

plus any columns the caller asked to keep (e.g. the column that names the target stream), and, under
``on_error="dlq"``, ``_s2_payload`` (binary: a bad row's original input, the dead letter's body).

The upsert changelog's flat form (see `_changelog`) adds

    _s2_action     binary                                  the ``@action`` header's value

and then every record's headers are ``(@key, _s2_key)``, ``(@action, _s2_action)``, then ``_s2_headers``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink._frame_names import TIMESTAMP_COLUMN
from s2_sink.errors import EncodeError

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

__all__ = [
    "ACTION",
    "BODY",
    "DLQ_BATCH",
    "DLQ_ERROR",
    "DLQ_PARTITION",
    "DLQ_ROW_HASH",
    "DLQ_TARGET",
    "DLQ_TRUNCATED",
    "ERROR",
    "FRAME_COLUMNS",
    "FRAME_DDL",
    "HEADERS",
    "HEADERS_ARROW_TYPE",
    "HEADERS_DDL",
    "KEY",
    "MAX_RECORD_BYTES",
    "PAYLOAD",
    "STREAM",
    "TIMESTAMP",
    "ArrowParts",
    "Rows",
    "frame_arrow_schema",
    "list_parts",
    "per_row_sum",
    "prepend_headers",
    "raise_for_errors",
    "stream_texts",
]

BODY = "_s2_body"
HEADERS = "_s2_headers"
TIMESTAMP = TIMESTAMP_COLUMN
KEY = "_s2_key"
ERROR = "_s2_error"
FRAME_COLUMNS = (BODY, HEADERS, TIMESTAMP, KEY, ERROR)
PAYLOAD = "_s2_payload"
ACTION = "_s2_action"
STREAM = "_s2_stream"

# The headers of a dead letter (a bad row written to the dead-letter stream): written by the task side,
# recognised by exactly-once's fingerprints and replays, so they live here, beside the frame's columns.
DLQ_ERROR = b"s2sink-error"
DLQ_BATCH = b"s2sink-batch-id"
DLQ_PARTITION = b"s2sink-partition"
DLQ_TARGET = b"s2sink-target-stream"
DLQ_TRUNCATED = b"s2sink-truncated"
DLQ_ROW_HASH = b"s2sink-row-hash"

#: S2 refuses records over 1 MiB metered (and batches over 1 MiB / 1000 records).
MAX_RECORD_BYTES = 1024 * 1024

HEADERS_DDL = "array<struct<name:binary,value:binary>>"
FRAME_DDL = f"{BODY} binary, {HEADERS} {HEADERS_DDL}, {TIMESTAMP} bigint, {KEY} binary, {ERROR} string"

HEADERS_ARROW_TYPE = pa.list_(pa.struct([pa.field("name", pa.binary()), pa.field("value", pa.binary())]))


class Rows(NamedTuple):
    """An Arrow batch as an encoder gets it: the body's columns, the metadata columns read (bad values'
    reasons in ``error``), and `Encoder.encode_frame`'s ``arranged`` and ``flat_changelog``."""

    batch: pa.RecordBatch
    schema: StructType
    data_columns: list[str]
    headers: pa.Array
    timestamp: pa.Array
    error: pa.Array
    arranged: bool
    flat_changelog: bool


class ArrowParts(NamedTuple):
    """An encoder's output: the rows (``source``, filtered and reordered like the arrays) and the frame's
    columns."""

    source: pa.RecordBatch
    body: pa.Array
    headers: pa.Array
    timestamp: pa.Array
    key: pa.Array
    error: pa.Array
    action: pa.Array | None = None


def frame_arrow_schema(kept: pa.Schema | None = None, *, action: bool = False) -> pa.Schema:
    fields = [
        pa.field(BODY, pa.binary(), nullable=False),
        pa.field(HEADERS, HEADERS_ARROW_TYPE),
        pa.field(TIMESTAMP, pa.int64()),
        pa.field(KEY, pa.binary()),
        pa.field(ERROR, pa.string()),
    ]
    if action:
        fields.append(pa.field(ACTION, pa.binary()))
    if kept is not None:
        fields.extend(kept)
    return pa.schema(fields)


def raise_for_errors(frame: pa.RecordBatch | pa.Table, *, stream: str | None = None) -> None:
    """EncodeError naming the stream, how many rows failed and the first reason, if any row failed."""
    errors = frame.column(ERROR)
    failed = errors.null_count != len(errors) and pc.sum(pc.is_valid(errors)).as_py()
    if not failed:
        return
    first = pc.drop_null(errors)[0].as_py()
    where = f"stream {stream!r}: " if stream is not None else ""
    more = f" (and {failed - 1} more rows)" if failed > 1 else ""
    raise EncodeError(f"{where}{first}{more}")


def stream_texts(targets: pa.Array) -> list[str | None]:
    """A `STREAM` column as text. Spark's cast to string does not check UTF-8: other bytes are kept as
    ``surrogateescape`` text, a bad stream name (not a crash) that encodes back to the bytes Spark hashed."""
    try:
        texts: list[str | None] = targets.to_pylist()
    except UnicodeDecodeError:
        binary = pa.large_binary() if pa.types.is_large_string(targets.type) else pa.binary()
        raw: list[bytes | None] = pc.cast(targets, binary).to_pylist()
        return [None if b is None else b.decode("utf-8", "surrogateescape") for b in raw]
    return texts


def list_parts(col: pa.ListArray) -> tuple[pa.Array, pa.Array]:
    """(offsets from 0, the child values they index), honouring a sliced ``col``."""
    if len(col) == 0:  # an empty child may come without an offsets buffer
        return pa.array([0], pa.int32()), col.values.slice(0, 0)
    offsets = col.offsets
    start = offsets[0].as_py()
    end = offsets[-1].as_py()
    if start or offsets.offset:  # from_arrays refuses sliced offsets together with a null mask
        offsets = pc.subtract(offsets, start)
    return offsets, col.values.slice(start, end - start)


def per_row_sum(offsets: pa.Array, values: pa.Array) -> pa.Array:
    """For each row i, the sum of ``values[offsets[i]:offsets[i+1]]`` (int64)."""
    cumulative = pc.cumulative_sum(pc.cast(values, pa.int64()))
    padded = pa.concat_arrays([pa.array([0], pa.int64()), cumulative])
    offsets = pc.cast(offsets, pa.int64())
    n = len(offsets) - 1
    return pc.subtract(pc.take(padded, offsets.slice(1, n)), pc.take(padded, offsets.slice(0, n)))


def prepend_headers(leading: list[tuple[bytes, pa.Array]], headers: pa.Array) -> pa.Array:
    """Per row: ``(name, value)`` for each of `leading` whose value is not null, in order, then the row's
    own `headers` (null = none), gathered from whole columns."""
    offsets, entries = list_parts(headers)
    bounds = np.asarray(offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    lengths = bounds[1:] - bounds[:-1]
    own, src = lengths, np.arange(len(entries), dtype=np.int64)  # the entries of rows not null
    if headers.null_count:
        valid = np.asarray(headers.is_valid(), dtype=bool)
        own, src = np.where(valid, lengths, 0), np.flatnonzero(np.repeat(valid, lengths))
    present = [np.asarray(values.is_valid(), dtype=bool) for _, values in leading]
    counts = np.stack([*present, own], axis=1).astype(np.int64).reshape(-1)
    starts = np.concatenate([[0], np.cumsum(counts)])
    # Each leading header's values first, then every own entry: an index into them for each new entry.
    index = np.empty(int(starts[-1]), dtype=np.int64)
    is_leading = np.zeros(len(index), dtype=bool)
    given = 0
    for j, has in enumerate(present):
        at = starts[:-1][j :: len(present) + 1][has]
        index[at], is_leading[at] = np.arange(given, given + len(at)), True
        given += len(at)
    index[~is_leading] = given + src
    values = [pc.drop_null(v) for _, v in leading]
    names = [pa.array([name] * len(v), pa.binary()) for (name, _), v in zip(leading, values, strict=True)]
    structs = pa.StructArray.from_arrays(
        [
            pa.concat_arrays([*names, entries.field(0)]).take(index),
            pa.concat_arrays([*values, pc.cast(entries.field(1), pa.binary())]).take(index),
        ],
        fields=list(HEADERS_ARROW_TYPE.value_type),
    )
    row_offsets = pa.array(starts[:: len(present) + 1], pa.int32())
    return pa.ListArray.from_arrays(row_offsets, structs, type=HEADERS_ARROW_TYPE)
