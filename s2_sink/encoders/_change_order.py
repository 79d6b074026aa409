"""The change order of an upsert changelog (``UpsertEncoder(order_by=...)``).

``order_by`` names the columns whose values order a key's changes (Delta CDF ``_commit_version``, a Kafka
offset, a CDC log position). Changes that tie on every ``order_by`` column are ordered by the record's
bytes, body first, then headers (compared as Spark compares ``array<struct<name,value>>``), so the order
is a function of the rows alone and never of how they were split into partitions or batches.

The writer lays a batch out with every change of a (stream, key) in one task and sorts each task's rows
by `sort_changes`: a (stream, key)'s changes together, in change order. With ``compact=True`` the task
then keeps the last good change of each (stream, key) as it reads its rows (`last_changes`), so one
shuffle and one sort do both. A null ``order_by`` value is a bad row: a change without a position cannot
be placed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    MapType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from s2_sink.encoders._column_checks import INTEGRAL_TYPES, column_type
from s2_sink.encoders._frame import ACTION, BODY, ERROR, HEADERS, KEY, STREAM
from s2_sink.errors import ConfigError

__all__ = [
    "RANK",
    "SEQ",
    "check_key_column",
    "check_order_column",
    "col",
    "compact_changes",
    "last_changes",
    "null_order_column",
    "order_by_columns",
    "sort_changes",
    "sorted_indices",
]

SEQ: Final = "_s2_seq"
RANK: Final = "_s2_rank"
"""Columns `compact_changes` adds to a frame for its ranking (and drops)."""

# Types with one total order that Spark and Arrow agree on (maps have none; arrays and structs do in
# Spark, but a change position is a scalar, and Arrow cannot sort them).
_ORDERABLE = (
    BooleanType,
    *INTEGRAL_TYPES,
    FloatType,
    DoubleType,
    DecimalType,
    StringType,
    BinaryType,
    DateType,
    TimestampType,
    TimestampNTZType,
)


def order_by_columns(order_by: str | Sequence[str] | None) -> tuple[str, ...]:
    """``order_by`` as a tuple of column names (empty: no change order); ConfigError on a bad value."""
    if order_by is None:
        return ()
    names = (order_by,) if isinstance(order_by, str) else tuple(order_by)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise ConfigError(
            f"order_by must be a column name or a non-empty list of column names, got {order_by!r}"
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"order_by names a column twice: {list(names)!r}")
    return names


def check_order_column(schema: StructType, name: str) -> None:
    """ConfigError unless `name` is a column of a type with a total order (see `_ORDERABLE`)."""
    dtype = column_type(schema, name, "order_by")
    if not isinstance(dtype, _ORDERABLE):
        raise ConfigError(
            f"order_by column {name!r} has type {dtype.simpleString()}, which has no usable order; "
            "order_by takes numeric, string, binary, boolean, date or timestamp columns (a commit version, "
            "an offset, a log position): cast it, or take a scalar field of it (e.g. col.field)"
        )


def check_key_column(schema: StructType, name: str) -> None:
    """ConfigError if upsert key column `name` is a map, array or struct (no stable key identity: a map's
    entries have no fixed order, and the Flink connector keys by scalar columns)."""
    dtype = schema[name].dataType
    if isinstance(dtype, MapType | ArrayType | StructType):
        raise ConfigError(
            f"upsert key column {name!r} has type {dtype.simpleString()}; key columns must be scalar "
            "(string, numeric, boolean, binary, date, timestamp): flatten it into scalar key columns "
            "(e.g. col.field) or key by to_json(col) in a string column"
        )


def null_order_column(column: str) -> str:
    """A change whose `column` (an ``order_by`` column) is null."""
    return f"order_by column {column!r} is null: a change without a position cannot be ordered"


def col(name: str) -> Column:
    """A top-level column by its exact name (dots and backticks in names are not paths)."""
    return F.col("`" + name.replace("`", "``") + "`")


def compact_changes(frame: DataFrame) -> DataFrame:
    """An upsert record frame (the changelog flat) with only each key's last good change of the micro-batch,
    and every bad row, where there is no ``order_by`` (``UpsertEncoder(compact=True)`` across a batch; with
    ``order_by`` the write tasks compact, `last_changes`).

    "Last" and "order" are the input order (``_s2_seq`` = input partition << 33 + position, taken right
    after the narrow encoding step, so it is the input's), and each input partition's survivors are put
    back together, in input order."""
    names = frame.columns
    framed = frame.withColumn(SEQ, F.monotonically_increasing_id())
    # Bad rows are ranked apart and all kept (they become dead letters): a bad last change must not push
    # out the key's last good one, or the compacted table would differ from the uncompacted one.
    good = F.col(ERROR).isNull()
    rank = F.row_number().over(Window.partitionBy(KEY, good).orderBy(F.col(SEQ).desc()))
    survivors = framed.withColumn(RANK, rank).filter((good & (F.col(RANK) == 1)) | ~good)
    survivors = survivors.repartition(F.shiftright(F.col(SEQ), 33)).sortWithinPartitions(SEQ)
    return survivors.select(*[col(c) for c in names])


def sort_changes(frame: DataFrame, order_by: Sequence[str], *, routed: bool) -> DataFrame:
    """`frame` (the changelog flat, the ``order_by`` columns kept, every change of a (stream, key) in one
    partition) sorted within each partition so that each (stream, key)'s changes are together and in
    change order: by a hash of (stream, key), then (stream, key) itself, the ``order_by`` values, then the
    record's bytes (body, ``@action``, the other headers). The hash comes first because Spark compares a
    prefix of the first sort column before whole rows, and the JSON keys all begin alike."""
    group = [F.col(STREAM)] if routed else []
    group.append(F.col(KEY))
    ties = [F.col(BODY), *(F.col(c) for c in (ACTION, HEADERS) if c in frame.columns)]
    return frame.sortWithinPartitions(F.xxhash64(*group), *group, *(col(c) for c in order_by), *ties)


def last_changes(frames: Iterable[pa.RecordBatch], *, routed: bool) -> Iterator[pa.RecordBatch]:
    """`frames` (one task's rows, sorted by `sort_changes`) with only the last good change of each
    (stream, key), and every bad row (an error, or no target stream), in order: ``compact=True``.

    A (stream, key)'s changes may go on in the next frame, so the tail of a frame from its last good row
    on is held back until the next good row shows whether that row was superseded."""
    held: list[pa.RecordBatch] = []  # the last good row so far (held[0]'s first row) and bad rows after it
    held_group: tuple[object, ...] = ()
    for frame in frames:
        good = _good(frame, routed)
        positions = np.flatnonzero(good)
        if not len(positions):
            if held:
                held.append(frame)
            elif frame.num_rows:
                yield frame
            continue
        groups = [frame.column(c) for c in ((STREAM, KEY) if routed else (KEY,))]
        if held:
            superseded = _group_at(groups, int(positions[0])) == held_group
            yield from _nonempty([held[0].slice(1) if superseded else held[0], *held[1:]])
        keep = ~good
        keep[positions[:-1]] = _next_differs([g.take(pa.array(positions)) for g in groups])
        last = int(positions[-1])
        head = frame.slice(0, last)
        yield from _nonempty([head if keep[:last].all() else head.filter(pa.array(keep[:last]))])
        held, held_group = [frame.slice(last)], _group_at(groups, last)
    yield from _nonempty(held)


def _good(frame: pa.RecordBatch, routed: bool) -> np.ndarray:
    """Which rows are good changes (no error, a target stream): the ones compaction chooses among."""
    good = pc.is_null(frame.column(ERROR))
    if routed:
        good = pc.and_(good, pc.is_valid(frame.column(STREAM)))
    return np.asarray(good.to_numpy(zero_copy_only=False), dtype=bool)


def _group_at(groups: list[pa.Array], i: int) -> tuple[object, ...]:
    return tuple(g[i].as_py() for g in groups)


def _next_differs(groups: list[pa.Array]) -> np.ndarray:
    """For each row but the last, whether the next row is of another (stream, key): a run's last row."""
    n = len(groups[0])
    differs = np.zeros(n - 1, dtype=bool)
    for g in groups:
        ne = pc.not_equal(g.slice(1), g.slice(0, n - 1))
        differs |= np.asarray(ne.to_numpy(zero_copy_only=False), dtype=bool)
    return differs


def _nonempty(frames: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    return (f for f in frames if f.num_rows)


def sorted_indices(order: Sequence[pa.Array], body: pa.Array, headers: pa.Array | None) -> pa.Array:
    """Row indices in change order: `order` values, then `body`, then `headers` (lists of name/value
    structs, compared element by element like Spark's arrays). A null `order` value is a bad row, so
    where nulls sort does not matter."""
    names = [f"o{i}" for i in range(len(order))]
    table = pa.table({**dict(zip(names, order, strict=True)), "_body": body})
    keys = [(n, "ascending") for n in [*names, "_body"]]
    indices = pc.sort_indices(table, sort_keys=keys)
    if headers is None or len(table) < 2:
        return indices
    # Arrow cannot sort lists: order each run of rows tied on everything else by its headers here.
    tied = table.take(indices).to_pylist()
    values = headers.take(indices).to_pylist()
    out = indices.to_pylist()
    start = 0
    for end in range(1, len(out) + 1):
        if end < len(out) and tied[end] == tied[start]:
            continue
        if end - start > 1:
            run = sorted(range(start, end), key=lambda i: [(h["name"], h["value"]) for h in values[i] or ()])
            out[start:end] = [out[i] for i in run]
        start = end
    return pa.array(out, pa.int64())
