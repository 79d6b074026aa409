"""The change order of an upsert changelog (``UpsertEncoder(order_by=...)``).

``order_by`` names the columns whose values order a key's changes (Delta CDF ``_commit_version``, a Kafka
offset, a CDC log position). Changes that tie on every ``order_by`` column are ordered by the record's
bytes, body first, then headers (compared as Spark compares ``array<struct<name,value>>``), so the order
is a function of the rows alone and never of how they were split into partitions or batches.

The writer carries the order in the frame column `ORDER` (a struct of the ``order_by`` values) until it
has laid the batch out: every change of a (stream, key) in one task, sorted by `sort_changes`. A null
``order_by`` value is a bad row: a change without a position cannot be placed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

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
from s2_sink.encoders._frame import ACTION, BODY, ERROR, HEADERS, KEY
from s2_sink.errors import ConfigError

__all__ = [
    "ORDER",
    "RANK",
    "SEQ",
    "check_key_column",
    "check_order_column",
    "col",
    "compact_changes",
    "null_order_column",
    "order_by_columns",
    "order_struct",
    "sort_changes",
    "sorted_indices",
]

ORDER: Final = "_s2_order"
"""Frame column the writer sorts a key's changes by: ``struct(*order_by)``; dropped before the write."""
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


def order_struct(order_by: Sequence[str]) -> Column:
    """The `ORDER` column's expression: the ``order_by`` values in a struct, compared field by field."""
    return F.struct(*[col(c).alias(f"o{i}") for i, c in enumerate(order_by)])


def compact_changes(frame: DataFrame, order_by: Sequence[str]) -> DataFrame:
    """An upsert record frame (the changelog flat, the ``order_by`` columns kept) with only each key's last
    good change of the micro-batch, and every bad row (``UpsertEncoder(compact=True)`` across a batch).

    With `order_by`, "last" is the last by it, ties by the record's bytes (the same survivor for any
    split), and the writer lays the survivors out by key and change order afterwards. Without, "last" and
    "order" are the input order (``_s2_seq`` = input partition << 33 + position, taken right after the
    narrow encoding step, so it is the input's), and each input partition's survivors are put back
    together, in input order."""
    names = frame.columns
    framed = frame.withColumn(SEQ, F.monotonically_increasing_id())
    if order_by:
        last = [*(col(c).desc() for c in order_by), F.col(BODY).desc(), F.col(ACTION).desc()]
        last += [F.col(HEADERS).desc()] if HEADERS in names else []
    else:
        last = [F.col(SEQ).desc()]
    # Bad rows are ranked apart and all kept (they become dead letters): a bad last change must not push
    # out the key's last good one, or the compacted table would differ from the uncompacted one (and from
    # the Arrow path's per-batch compaction, which leaves bad rows out of the ranking too).
    good = F.col(ERROR).isNull()
    rank = F.row_number().over(Window.partitionBy(KEY, good).orderBy(*last))
    survivors = framed.withColumn(RANK, rank).filter((good & (F.col(RANK) == 1)) | ~good)
    if not order_by:
        survivors = survivors.repartition(F.shiftright(F.col(SEQ), 33)).sortWithinPartitions(SEQ)
    return survivors.select(*[col(c) for c in names])


def sort_changes(frame: DataFrame) -> DataFrame:
    """`frame` sorted within each partition by change order (`ORDER`, then the record's bytes), without
    `ORDER`; unchanged when it has no `ORDER` column."""
    if ORDER not in frame.columns:
        return frame
    ties = [F.col(BODY)]
    if ACTION in frame.columns:  # the changelog flat: headers (@key, @action, own) compare as these
        ties += [F.col(KEY), F.col(ACTION)]
    ties += [F.col(HEADERS)] if HEADERS in frame.columns else []
    return frame.sortWithinPartitions(F.col(ORDER), *ties).drop(ORDER)


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
