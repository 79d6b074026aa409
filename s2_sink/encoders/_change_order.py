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

import itertools
import math
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
    "in_change_order",
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


def sort_changes(frame: DataFrame, group: Sequence[Column], order_by: Sequence[str]) -> DataFrame:
    """`frame` (every change of a (stream, key) in one partition) sorted within each partition so that each
    (stream, key)'s changes are together and in change order: by `group` (what tells the (stream, key)s
    apart: record frame columns or the input's key columns, led by their hash where they are encoded JSON,
    whose first bytes are alike and Spark compares a prefix of the first sort column before whole rows),
    then the ``order_by`` values. Changes tied on all of it are left to the write task (`in_change_order`):
    sorting on the record's bytes in Spark would carry and compare them all."""
    return frame.sortWithinPartitions(*group, *(col(c) for c in order_by))


def in_change_order(
    frames: Iterable[pa.RecordBatch], order_by: Sequence[str], *, routed: bool
) -> Iterator[pa.RecordBatch]:
    """`frames` (one task's rows, sorted by `sort_changes`) with each run of rows tied on (stream, key) and
    every ``order_by`` value put in the order of the records' bytes (`_record_bytes`), in place: the rows
    then are in change order. Ties are compared as Spark's sort compared them (`_tied`), so a run is
    exactly a run Spark left in an arbitrary order.

    A run may go on in the next frame, so each frame's last run is held back until a row of another run
    shows (a run is held whole: one key's changes at one position)."""
    columns = [*((STREAM,) if routed else ()), KEY, *order_by]
    held: list[pa.RecordBatch] = []
    for frame in frames:
        n = frame.num_rows
        if not n:
            continue
        starts = np.ones(n, dtype=bool)
        starts[1:] = ~_tied(frame, columns)
        if held:
            starts[0] = not _rows_tied(held[-1], held[-1].num_rows - 1, frame, 0, columns)
        if not starts.any():  # the whole frame goes on with the held run
            held.append(frame)
            continue
        first, last = int(np.argmax(starts)), int(np.flatnonzero(starts)[-1])
        if held:
            yield _by_bytes(pa.concat_batches([*held, frame.slice(0, first)]))
        if last > first:
            yield _runs_by_bytes(frame.slice(first, last - first), starts[first:last])
        held = [frame.slice(last)]
    if held:
        yield _by_bytes(pa.concat_batches(held))


def _tied(frame: pa.RecordBatch, columns: Sequence[str]) -> np.ndarray:
    """For each row but the first, whether it equals the row before on every one of `columns`, as Spark's
    sort compares (two nulls tie; so do two NaNs, and -0.0 with 0.0, as IEEE equality already has it)."""
    n = frame.num_rows
    tied = np.ones(n - 1, dtype=bool)
    for name in columns:
        values = frame.column(name)
        after, before = values.slice(1), values.slice(0, n - 1)
        same = pc.fill_null(pc.equal(after, before), False)
        same = pc.or_(same, pc.and_(pc.is_null(after), pc.is_null(before)))
        if pa.types.is_floating(values.type):
            same = pc.or_(same, pc.fill_null(pc.and_(pc.is_nan(after), pc.is_nan(before)), False))
        tied &= np.asarray(same.to_numpy(zero_copy_only=False), dtype=bool)
    return tied


def _rows_tied(a: pa.RecordBatch, i: int, b: pa.RecordBatch, j: int, columns: Sequence[str]) -> bool:
    """`_tied` of row `i` of `a` and row `j` of `b`."""
    for name in columns:
        x, y = a.column(name)[i].as_py(), b.column(name)[j].as_py()
        nan = isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
        if not (x == y or nan):
            return False
    return True


def _record_bytes(frame: pa.RecordBatch) -> list[tuple[object, ...]]:
    """Each row's record bytes as Spark compares them: body, ``@action`` (the changelog flat), then the
    other headers (an array of name/value structs: element by element, a null array first)."""
    names = frame.schema.names
    bodies = frame.column(BODY).to_pylist()
    actions = frame.column(ACTION).to_pylist() if ACTION in names else [b""] * len(bodies)
    lists = frame.column(HEADERS).to_pylist() if HEADERS in names else [None] * len(bodies)
    return [
        (b, a, (0,) if hs is None else (1, [(h["name"], h["value"]) for h in hs]))
        for b, a, hs in zip(bodies, actions, lists, strict=True)
    ]


def _by_bytes(run: pa.RecordBatch) -> pa.RecordBatch:
    """One run of tied rows in the order of their record bytes."""
    if run.num_rows < 2:
        return run
    keys = _record_bytes(run)
    return run.take(pa.array(sorted(range(len(keys)), key=keys.__getitem__), pa.int64()))


def _runs_by_bytes(frame: pa.RecordBatch, starts: np.ndarray) -> pa.RecordBatch:
    """`frame` with each run (a row where `starts` is true and the rows after it until the next) of more
    than one row put in the order of its record bytes; the rest in place."""
    if starts.all():
        return frame
    bounds = [*np.flatnonzero(starts).tolist(), frame.num_rows]
    order = np.arange(frame.num_rows)
    for a, b in itertools.pairwise(bounds):
        if b - a > 1:
            keys = _record_bytes(frame.slice(a, b - a))
            order[a:b] = [a + i for i in sorted(range(b - a), key=keys.__getitem__)]
    return frame.take(pa.array(order))


def last_changes(frames: Iterable[pa.RecordBatch], *, routed: bool) -> Iterator[pa.RecordBatch]:
    """`frames` (one task's rows in change order, `in_change_order`) with only the last good change of each
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
