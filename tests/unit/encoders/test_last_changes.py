"""``compact=True`` with ``order_by`` in the write task: `last_changes` over a task's rows, sorted by
(stream, key) and change order, keeps each (stream, key)'s last good change and every bad row, in order,
however the rows are cut into Arrow batches (a key's changes often straddle two)."""

from __future__ import annotations

import itertools

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from s2_sink.encoders._change_order import last_changes
from s2_sink.encoders._frame import BODY, ERROR, KEY, STREAM
from tests.hypothesis_profiles import examples

Row = tuple[str | None, bytes, int, str | None]
"""(stream, key, position, error) of one change; the body names the row."""


def _rows(draw: st.DrawFn) -> list[Row]:
    row = st.tuples(
        st.sampled_from(["a", "b", None]),
        st.sampled_from([b"k1", b"k2", b"k3"]),
        st.integers(0, 5),
        st.sampled_from([None, None, None, "bad"]),
    )
    rows = draw(st.lists(row, max_size=30))
    # what `sort_changes` gives a task: (stream, key) together, then change order
    return sorted(rows, key=lambda r: (r[0] or "", r[0] is not None, r[1], r[2], r[3] or ""))


@st.composite
def _split_rows(draw: st.DrawFn) -> tuple[list[Row], list[int]]:
    rows = _rows(draw)
    cuts = sorted(draw(st.lists(st.integers(0, len(rows)), max_size=5)))
    return rows, cuts


def _frames(rows: list[Row], cuts: list[int], routed: bool) -> list[pa.RecordBatch]:
    table = {
        BODY: pa.array([f"{i}".encode() for i in range(len(rows))], pa.binary()),
        KEY: pa.array([r[1] for r in rows], pa.binary()),
        ERROR: pa.array([r[3] for r in rows], pa.string()),
    }
    if routed:
        table[STREAM] = pa.array([r[0] for r in rows], pa.string())
    whole = pa.RecordBatch.from_pydict(table)
    bounds = [0, *cuts, len(rows)]
    return [whole.slice(a, b - a) for a, b in itertools.pairwise(bounds)]


def _expected(rows: list[Row], routed: bool) -> list[int]:
    """The indices of the survivors: per (stream, key), its last good change; every bad row."""

    def bad(r: Row) -> bool:
        return r[3] is not None or (routed and r[0] is None)

    def group(r: Row) -> tuple[str | None, bytes]:
        return (r[0] if routed else None, r[1])

    last = {group(r): i for i, r in enumerate(rows) if not bad(r)}
    return [i for i, r in enumerate(rows) if bad(r) or last[group(r)] == i]


@settings(max_examples=examples(300, fast=50), deadline=None)
@given(_split_rows(), st.booleans())
def test_each_stream_and_keys_last_good_change_and_every_bad_row_survive(
    split: tuple[list[Row], list[int]], routed: bool
) -> None:
    rows, cuts = split
    if not routed:  # one stream: a key's changes are one run
        rows = sorted((("s", k, p, e) for _, k, p, e in rows), key=lambda r: (r[1], r[2], r[3] or ""))
    out = list(last_changes(_frames(rows, cuts, routed), routed=routed))
    assert all(f.num_rows for f in out)
    kept = [int(b) for f in out for b in f.column(BODY).to_pylist()]
    assert kept == _expected(rows, routed)


def test_a_key_cut_by_a_batch_boundary_keeps_only_its_last_change() -> None:
    """k1's changes end the first batch and begin the second (a bad row between them): only the second
    batch's k1 survives, the bad row stays, in order."""
    rows: list[Row] = [("s", b"k0", 0, None), ("s", b"k1", 1, None), ("s", b"k1", 2, "bad")]
    rows += [("s", b"k1", 3, None), ("s", b"k2", 4, None)]
    out = list(last_changes(_frames(rows, [3], routed=False), routed=False))
    assert [int(b) for f in out for b in f.column(BODY).to_pylist()] == [0, 2, 3, 4]


def test_the_same_key_in_two_streams_is_two_changelogs() -> None:
    rows: list[Row] = [("a", b"k", 0, None), ("a", b"k", 1, None), ("b", b"k", 2, None)]
    out = list(last_changes(_frames(rows, [], routed=True), routed=True))
    assert [int(b) for f in out for b in f.column(BODY).to_pylist()] == [1, 2]
