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
from collections.abc import Iterable, Iterator, Sequence
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from s2_sink.encoders._frame import ACTION, BODY, ERROR, HEADERS, KEY, STREAM
from s2_sink.errors import ConfigError

__all__ = [
    "RANK",
    "SEQ",
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
    for piece, starts in _whole_runs(frames, [*((STREAM,) if routed else ()), KEY, *order_by]):
        yield _runs_by_bytes(piece, starts)


def _whole_runs(
    frames: Iterable[pa.RecordBatch], columns: Sequence[str]
) -> Iterator[tuple[pa.RecordBatch, np.ndarray]]:
    """`frames` cut so that no run of rows tied on `columns` (`_tied`) is split, each piece with where its
    runs start. A run may go on in the next frame, so each frame's last run is held back until a row of
    another run shows."""
    held: list[pa.RecordBatch] = []
    for frame in frames:
        n = frame.num_rows
        if not n:
            continue
        starts = np.ones(n, dtype=bool)
        starts[1:] = ~_tied(frame, columns)
        if held:
            last_held = held[-1].slice(held[-1].num_rows - 1)
            starts[0] = not _tied(pa.concat_batches([last_held, frame.slice(0, 1)]), columns)[0]
        if not starts.any():  # the whole frame goes on with the held run
            held.append(frame)
            continue
        first, last = int(np.argmax(starts)), int(np.flatnonzero(starts)[-1])
        if held:
            run = pa.concat_batches([*held, frame.slice(0, first)])
            yield run, np.arange(run.num_rows) == 0
        if last > first:
            yield frame.slice(first, last - first), starts[first:last]
        held = [frame.slice(last)]
    if held:
        run = pa.concat_batches(held)
        yield run, np.arange(run.num_rows) == 0


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
    (stream, key), and every bad row (an error, or no target stream), in order: ``compact=True``. A
    (stream, key)'s changes are one run of rows (the rows are sorted), held whole (`_whole_runs`)."""
    for piece, starts in _whole_runs(frames, [STREAM, KEY] if routed else [KEY]):
        good = _good(piece, routed)
        positions = np.flatnonzero(good)
        keep = ~good
        if len(positions):  # a good row whose run has no later good row
            run = np.cumsum(starts)[positions]
            keep[positions] = np.append(run[1:] != run[:-1], True)
        yield piece if keep.all() else piece.filter(pa.array(keep))


def _good(frame: pa.RecordBatch, routed: bool) -> np.ndarray:
    """Which rows are good changes (no error, a target stream): the ones compaction chooses among."""
    good = pc.is_null(frame.column(ERROR))
    if routed:
        good = pc.and_(good, pc.is_valid(frame.column(STREAM)))
    return np.asarray(good.to_numpy(zero_copy_only=False), dtype=bool)


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
