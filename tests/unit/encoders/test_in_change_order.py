"""``order_by`` in the write task: Spark sorts a task's rows by (stream, key) and change order only, and
`in_change_order` puts each run of rows tied on all of it in the order of their record bytes (body,
``@action``, other headers), however Spark left the run and however the rows are cut into Arrow batches,
the ties compared as Spark's sort compares them (nulls tie, NaNs tie, -0.0 ties 0.0)."""

from __future__ import annotations

import itertools
import math
import random

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from s2_sink.encoders._change_order import in_change_order
from s2_sink.encoders._frame import ACTION, BODY, HEADERS, HEADERS_ARROW_TYPE, KEY, STREAM
from tests.hypothesis_profiles import examples

Row = tuple[str | None, bytes, float | None, bytes, bytes, list[tuple[bytes, bytes]] | None]
"""(stream, key, position, body, action, headers) of one change."""

_ROW = st.tuples(
    st.sampled_from(["a", "b", None]),
    st.sampled_from([b"k1", b"k2"]),
    st.sampled_from([None, 1.0, 2.0, -0.0, 0.0, math.nan]),
    st.sampled_from([b"x", b"y", b"xy"]),
    st.sampled_from([b"u", b"d"]),
    st.sampled_from([None, [], [(b"h", b"1")], [(b"h", b"2")], [(b"h", b"1"), (b"g", b"0")]]),
)


def _position(value: float | None) -> tuple[int, float]:
    """A change position as Spark's sort orders it: nulls first, -0.0 equal to 0.0, NaN above all."""
    if value is None:
        return (0, 0.0)
    return (2, 0.0) if math.isnan(value) else (1, value + 0.0)


def _spark_key(row: Row) -> tuple[object, ...]:
    return (row[0] is not None, row[0] or "", row[1], _position(row[2]))


def _bytes_key(row: Row) -> tuple[object, ...]:
    return (row[3], row[4], (0,) if row[5] is None else (1, row[5]))


def _frames(rows: list[Row], cuts: list[int], routed: bool) -> list[pa.RecordBatch]:
    table = {
        BODY: pa.array([r[3] for r in rows], pa.binary()),
        ACTION: pa.array([r[4] for r in rows], pa.binary()),
        HEADERS: pa.array(
            [None if r[5] is None else [{"name": n, "value": v} for n, v in r[5]] for r in rows],
            HEADERS_ARROW_TYPE,
        ),
        KEY: pa.array([r[1] for r in rows], pa.binary()),
        "ts": pa.array([r[2] for r in rows], pa.float64()),
        "row": pa.array(range(len(rows)), pa.int64()),
    }
    if routed:
        table[STREAM] = pa.array([r[0] for r in rows], pa.string())
    whole = pa.RecordBatch.from_pydict(table)
    bounds = [0, *cuts, len(rows)]
    return [whole.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


@settings(max_examples=examples(300, fast=60), deadline=None)
@given(
    rows=st.lists(_ROW, max_size=30),
    seed=st.integers(0, 2**32),
    cuts=st.lists(st.integers(0, 30), max_size=5),
    routed=st.booleans(),
)
def test_ties_in_record_order_however_split(
    rows: list[Row], seed: int, cuts: list[int], routed: bool
) -> None:
    if not routed:
        rows = [(None, *r[1:]) for r in rows]
    random.Random(seed).shuffle(rows)
    spark_sorted = sorted(rows, key=_spark_key)  # stable: ties stay in their (shuffled) fetch order
    cuts = sorted(min(c, len(rows)) for c in cuts)
    out = list(in_change_order(_frames(spark_sorted, cuts, routed), ["ts"], routed=routed))
    got = [spark_sorted[i] for f in out for i in f.column("row").to_pylist()]
    want = sorted(rows, key=lambda r: (_spark_key(r), _bytes_key(r)))
    assert [(_spark_key(r), _bytes_key(r)) for r in got] == [(_spark_key(r), _bytes_key(r)) for r in want]
    assert all(f.num_rows for f in out)


def test_untied_rows_pass_through_unchanged() -> None:
    """No ties: the frames are handed on as they came (no copy, no reorder)."""
    rows: list[Row] = [(None, b"k1", 1.0, b"y", b"u", None), (None, b"k1", 2.0, b"x", b"u", None)]
    frames = _frames(rows, [], routed=False)
    out = list(in_change_order(frames, ["ts"], routed=False))
    assert [f.column("row").to_pylist() for f in out] == [[0], [1]]
