"""Deterministic chunking: the same rows in the same order make the same appends, however Spark splits
them into Arrow batches; every append respects both caps; the appends concatenate back to the input."""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass, field, replace

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from s2_sdk import Record

from s2_sink._write.task.chunker import Chunker, cut_points, prefix_sums
from s2_sink._write.task.dead_letters import BadRows
from s2_sink._write.task.frame_records import FrameInput, FrameSpan, records_of
from s2_sink._write.write_plan import OnError, PartitionContext, WritePlan
from s2_sink.config import ONE_MIB, S2Config
from s2_sink.encoders._frame import BODY, ERROR, HEADERS, HEADERS_ARROW_TYPE
from s2_sink.encoders._metered import metered_size
from tests.hypothesis_profiles import examples

LOCAL = "http://127.0.0.1:1"
STREAM_COLUMN = "_target"
DLQ = "dead-letters"
CTX = PartitionContext(batch_id=3, partition_id=1, attempt_number=0, task_attempt_id=9, stage_id=2)

Sent = tuple[str, int, list[bytes], int]
"""One emitted chunk as compared: stream, index, record bodies, metered bytes."""


@dataclass(frozen=True)
class Row:
    stream: str | None
    body: bytes
    headers: list[tuple[bytes, bytes]] | None
    error: str | None


@dataclass
class Collector:
    chunks: list[Sent] = field(default_factory=list)
    records: dict[tuple[str, int], list[Record]] = field(default_factory=dict)

    def __call__(self, stream: str, index: int, items: list[Record | FrameSpan], nbytes: int) -> None:
        # The bulk path's spans stand for their rows: expanded, they must be the record path's records.
        records = [r for i in items for r in (records_of([i]) if isinstance(i, FrameSpan) else [i])]
        self.chunks.append((stream, index, [r.body for r in records], nbytes))
        self.records[(stream, index)] = records


@dataclass(frozen=True)
class Case:
    rows: list[Row]
    routed: bool
    max_records: int
    max_bytes: int
    max_open: int
    on_error: OnError


_HEADERS = st.one_of(
    st.none(), st.lists(st.tuples(st.sampled_from([b"k", b"@key"]), st.binary(max_size=6)), max_size=3)
)
# (target stream, body tail, headers, error roll): a roll of 0 marks a bad row, 1 a null target when routed
_ROWS = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.binary(max_size=40), _HEADERS, st.integers(0, 19)),
    max_size=60,
)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    routed = draw(st.booleans())
    rows = []
    for i, (stream, tail, headers, roll) in enumerate(draw(_ROWS)):
        # the row number leads the body, so every record is recognisable in the chunks it lands in
        body = str(i).encode() + b":" + tail
        target = (None if roll == 1 else stream) if routed else None
        rows.append(Row(target, body, headers, "bad row" if roll in (0, 2) else None))
    return Case(
        rows=rows,
        routed=routed,
        max_records=draw(st.integers(1, 6)),
        max_bytes=draw(st.integers(60, 200)),
        max_open=draw(st.integers(1, 3)),
        on_error=draw(st.sampled_from(["skip", "dlq"])),
    )


def frame_of(case: Case) -> pa.Table:
    columns = {
        BODY: pa.array([r.body for r in case.rows], pa.binary()),
        HEADERS: pa.array(
            [
                None if r.headers is None else [{"name": n, "value": v} for n, v in r.headers]
                for r in case.rows
            ],
            HEADERS_ARROW_TYPE,
        ),
        ERROR: pa.array([r.error for r in case.rows], pa.string()),
    }
    if case.routed:
        columns[STREAM_COLUMN] = pa.array([r.stream for r in case.rows], pa.string())
    return pa.table(columns)


def plan_of(case: Case) -> WritePlan:
    cfg = S2Config(
        basin="test-basin",
        stream="events",
        account_endpoint=LOCAL,
        basin_endpoint=LOCAL,
        batch_max_records=case.max_records,
        flush_buffer_bytes=case.max_bytes,
        max_buffered_requests=case.max_open,
    )
    return WritePlan(
        cfg=cfg,
        batch_id=CTX.batch_id,
        stream=None if case.routed else "events",
        stream_column=STREAM_COLUMN if case.routed else None,
        on_error=case.on_error,
        dlq_stream=DLQ if case.on_error == "dlq" else None,
    )


def chunk(case: Case, batches: list[pa.RecordBatch], *, spans: bool = False) -> Collector:
    """Run the task's real input path (frame input, bad rows, chunker) over `batches` (with `spans`,
    all-good batches go in as Arrow slices, as on the bulk path)."""
    plan = plan_of(case)
    out = Collector()
    chunker: Chunker[Record | FrameSpan] = Chunker(
        max_records=case.max_records, max_bytes=case.max_bytes, max_open=case.max_open, emit=out
    )
    frame_input = FrameInput(plan, chunker, BadRows(plan, CTX, ONE_MIB), ONE_MIB)
    frame_input.spans = spans
    for batch in batches:
        frame_input.consume(batch)
    chunker.flush()
    return out


def split(table: pa.Table, cuts: list[int]) -> list[pa.RecordBatch]:
    bounds = sorted({0, table.num_rows, *(c % (table.num_rows + 1) for c in cuts)})
    return [batch for lo, hi in itertools.pairwise(bounds) for batch in table.slice(lo, hi - lo).to_batches()]


@settings(max_examples=examples(150, fast=30), deadline=None)
@given(cases(), st.lists(st.integers(0, 10_000), max_size=8))
def test_any_split_into_arrow_batches_gives_the_same_chunks(case: Case, cuts: list[int]) -> None:
    """The rows as one Arrow batch, as one batch per row, or split anywhere make identical chunks, as
    long as no partial chunk is sent early: routed rows are grouped by stream per Arrow batch, so where
    partial chunks compete under max_open, which one is sent early depends on the batches."""
    if case.routed:
        case = replace(case, max_open=8)  # four streams and the dead-letter stream: none sent early
    table = frame_of(case)
    # Chunks of different streams have no order between them (a batch's dead letters go before its
    # grouped rows): each stream's chunks, in order, are compared.
    whole = sorted(chunk(case, table.combine_chunks().to_batches()).chunks)
    assert sorted(chunk(case, split(table, cuts)).chunks) == whole
    assert sorted(chunk(case, split(table, list(range(table.num_rows)))).chunks) == whole


@settings(max_examples=examples(150, fast=30), deadline=None)
@given(cases(), st.lists(st.integers(0, 10_000), max_size=8))
def test_arrow_slices_make_the_chunks_records_make(case: Case, cuts: list[int]) -> None:
    """The bulk path's input (all-good batches as Arrow slices, batches with bad rows as records, both
    possibly in one chunk) cuts the same chunks of the same records as the record path."""
    table = frame_of(case)
    for batches in (table.combine_chunks().to_batches(), split(table, cuts)):
        by_records = chunk(case, batches)
        by_spans = chunk(case, batches, spans=True)
        assert by_spans.chunks == by_records.chunks
        assert by_spans.records == by_records.records


@settings(max_examples=examples(150, fast=30), deadline=None)
@given(cases())
def test_every_chunk_respects_both_caps(case: Case) -> None:
    """No chunk holds more than max_records records, or more than max_bytes unless it is one record,
    and each chunk's metered size is the sum of its records'."""
    out = chunk(case, frame_of(case).to_batches())
    for (_, _), records in out.records.items():
        nbytes = sum(metered_size(r.body, r.headers) for r in records)
        assert 1 <= len(records) <= case.max_records
        assert nbytes <= case.max_bytes or len(records) == 1
    assert [c[3] for c in out.chunks] == [
        sum(metered_size(r.body, r.headers) for r in out.records[(s, i)]) for s, i, _, _ in out.chunks
    ]


@settings(max_examples=examples(150, fast=30), deadline=None)
@given(cases())
def test_chunks_concatenate_back_to_the_input_in_order(case: Case) -> None:
    """Per stream, the chunks in index order are exactly that stream's good rows, in row order, with
    their headers; the dead-letter stream gets the bad rows in order (under dlq)."""
    out = chunk(case, frame_of(case).to_batches())
    expected: dict[str, list[tuple[bytes, list[tuple[bytes, bytes]]]]] = {}
    for r in case.rows:
        target = r.stream if case.routed else "events"
        if r.error is None and target is not None:
            expected.setdefault(target, []).append((r.body, r.headers or []))
        elif case.on_error == "dlq":
            expected.setdefault(DLQ, []).append((r.body, []))
    got: dict[str, list[tuple[bytes, list[tuple[bytes, bytes]]]]] = {}
    indexes: dict[str, list[int]] = {}
    for stream, index in sorted(out.records):
        indexes.setdefault(stream, []).append(index)
        for rec in out.records[(stream, index)]:
            headers = [] if stream == DLQ else list(rec.headers)  # a dead letter's headers say why
            got.setdefault(stream, []).append((rec.body, headers))
    assert got == expected
    assert all(ix == list(range(len(ix))) for ix in indexes.values())


def test_the_fullest_partial_chunk_is_sent_early_past_max_open() -> None:
    """With two partial chunks allowed, a third stream's first record sends the fullest one early (by
    bytes, ties broken by stream name); the others stay open until the end."""
    out: list[tuple[str, int, list[str], int]] = []
    chunker: Chunker[str] = Chunker(
        max_records=10, max_bytes=1000, max_open=2, emit=lambda s, i, items, n: out.append((s, i, items, n))
    )
    chunker.add("a", "a0", 10)
    chunker.add("b", "b0", 30)
    chunker.add("a", "a1", 10)
    chunker.add("c", "c0", 5)
    assert out == [("b", 0, ["b0"], 30)]
    chunker.add("b", "b1", 20)  # b re-opens: a (20 bytes) is now the fullest other
    assert out[-1] == ("a", 0, ["a0", "a1"], 20)
    chunker.flush()
    assert sorted(out[2:]) == [("b", 1, ["b1"], 20), ("c", 0, ["c0"], 5)]


def test_past_max_held_the_fullest_eighth_is_sent_at_once() -> None:
    """Open chunks over ``max_held`` bytes are sent, fullest first, down to seven eighths of it in one go:
    with thousands of streams at the cap, sending one chunk per added record sorted every open chunk on
    every add (a micro-batch routed to 10,000 streams of 100 rows spent minutes there). The bound holds."""
    streams, size, max_held = 2000, 10, 2000 * 10 * 3
    bursts: list[int] = []
    held = 0

    def emit(stream: str, index: int, items: list[int], nbytes: int) -> None:
        bursts[-1] += nbytes

    chunker: Chunker[int] = Chunker(
        max_records=1000, max_bytes=ONE_MIB, max_open=10_000, emit=emit, max_held=max_held
    )
    for i in range(streams * 10):  # round-robin, as rows routed by `id mod streams`
        bursts.append(0)
        chunker.add(f"s{i % streams:05d}", i, size)
        held += size - bursts[-1]
        assert held <= max_held
    sent = [b for b in bursts if b]
    assert sent, "the cap was reached"
    assert min(sent) >= max_held // 8
    assert len(sent) <= streams * 10 * size // (max_held // 8)


def test_a_run_and_single_adds_cut_alike() -> None:
    """add_run cuts a stream's run exactly where add, item by item, would."""
    sizes = [30, 50, 10, 90, 100, 5, 5, 5, 60]
    items = [f"r{i}" for i in range(len(sizes))]
    by_run: list[tuple[str, int, list[str], int]] = []
    by_one: list[tuple[str, int, list[str], int]] = []
    run: Chunker[str] = Chunker(max_records=3, max_bytes=100, max_open=4, emit=lambda *c: by_run.append(c))
    one: Chunker[str] = Chunker(max_records=3, max_bytes=100, max_open=4, emit=lambda *c: by_one.append(c))
    run.add_run("s", items[:4], sizes[:4])
    run.add_run("s", items[4:], sizes[4:])
    run.flush()
    for item, size in zip(items, sizes, strict=True):
        one.add("s", item, size)
    one.flush()
    assert by_run == by_one
    assert [c[2] for c in by_run] == [["r0", "r1", "r2"], ["r3"], ["r4"], ["r5", "r6", "r7"], ["r8"]]


@settings(max_examples=examples(300, fast=60), deadline=None)
@given(
    st.lists(st.integers(0, 120), max_size=80),
    st.lists(st.integers(0, 80), max_size=5),
    st.integers(1, 7),
    st.integers(8, 200),
    st.integers(1, 3),
)
def test_columnar_cuts_equal_the_item_by_item_chunker(
    sizes: list[int], splits: list[int], max_records: int, max_bytes: int, max_open: int
) -> None:
    """The cuts found over whole columns of sizes (`add_run`, split into runs anywhere, interleaved
    with another stream's items) are exactly those of `add`, item by item, on the same items."""
    by_run: list[tuple[str, int, list[int], int]] = []
    by_one: list[tuple[str, int, list[int], int]] = []
    run: Chunker[int] = Chunker(
        max_records=max_records, max_bytes=max_bytes, max_open=max_open, emit=lambda *c: by_run.append(c)
    )
    one: Chunker[int] = Chunker(
        max_records=max_records, max_bytes=max_bytes, max_open=max_open, emit=lambda *c: by_one.append(c)
    )
    bounds = sorted({0, len(sizes), *(c % (len(sizes) + 1) for c in splits)})
    for k, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        items = list(range(lo, hi))
        run.add_run("s", items, sizes[lo:hi])
        for i in items:
            one.add("s", i, sizes[i])
        run.add(f"other{k % 2}", -k, k)  # another stream's partial chunk competes under max_open
        one.add(f"other{k % 2}", -k, k)
    run.flush()
    one.flush()
    assert by_run == by_one


def _rows(first: int, lo: int, hi: int) -> tuple[int, int]:
    """A span: rows ``lo:hi`` of a run that starts at row `first`, as absolute rows."""
    return first + lo, first + hi


@settings(max_examples=examples(300, fast=60), deadline=None)
@given(
    st.lists(st.integers(0, 120), max_size=80),
    st.lists(st.integers(0, 80), max_size=5),
    st.integers(1, 7),
    st.integers(8, 200),
)
def test_spans_cut_where_single_adds_cut(
    sizes: list[int], splits: list[int], max_records: int, max_bytes: int
) -> None:
    """`add_span` closes chunks where `add`, item by item, would, and each chunk's spans cover exactly
    its items, in order, one span per run it draws from."""
    by_span: list[tuple[str, int, list[tuple[int, int]], int]] = []
    by_one: list[tuple[str, int, list[int], int]] = []
    spans: Chunker[tuple[int, int]] = Chunker(
        max_records=max_records, max_bytes=max_bytes, max_open=2, emit=lambda *c: by_span.append(c)
    )
    one: Chunker[int] = Chunker(
        max_records=max_records, max_bytes=max_bytes, max_open=2, emit=lambda *c: by_one.append(c)
    )
    bounds = sorted({0, len(sizes), *(c % (len(sizes) + 1) for c in splits)})
    for lo, hi in itertools.pairwise(bounds):
        spans.add_span("s", sizes[lo:hi], functools.partial(_rows, lo))
        for i in range(lo, hi):
            one.add("s", i, sizes[i])
    spans.flush()
    one.flush()
    expanded = [(s, i, [r for a, b in items for r in range(a, b)], n) for s, i, items, n in by_span]
    assert expanded == by_one
    assert all(a < b for _, _, items, _ in by_span for a, b in items)


@settings(max_examples=examples(300, fast=60), deadline=None)
@given(st.lists(st.integers(0, 120), max_size=60), st.integers(1, 7), st.integers(8, 200), st.data())
def test_cut_points_close_every_chunk_where_the_caps_say(
    sizes: list[int], max_records: int, max_bytes: int, data: st.DataObject
) -> None:
    """From any open chunk, every chunk between cuts respects both caps, and one more item would have
    broken one of them (greedy): the cuts are the rule itself, not only consistent with `add`."""
    count = data.draw(st.integers(0, max_records - 1))
    nbytes = data.draw(st.integers(0, max_bytes)) if count else 0
    prefix = prefix_sums(sizes)
    cuts = cut_points(prefix, max_records=max_records, max_bytes=max_bytes, count=count, nbytes=nbytes)
    starts = [0, *cuts]
    assert cuts == sorted(set(cuts))
    assert all(0 <= c < len(sizes) for c in cuts)
    for k, (lo, hi) in enumerate(itertools.pairwise([*starts, len(sizes)])):
        n0, b0 = (count, nbytes) if k == 0 else (0, 0)
        records, total = n0 + hi - lo, b0 + sum(sizes[lo:hi])
        assert records <= max_records
        assert total <= max_bytes or records == 1
        if hi < len(sizes):  # closed by a cut: the next item did not fit
            assert records >= 1
            assert records == max_records or total + sizes[hi] > max_bytes
