"""How the simulated Spark splits a micro-batch into write tasks: the input split (which a replay may draw
otherwise, SPARK-28650), the writer's repartition by (stream, key) with ``order_by`` and its sort into change
order (`sorted_indices`, the Python twin of `sort_changes`; with ``compact`` the tasks compact, by the real
`last_changes`), and a recovery's layout by record content
(`RecoveryLayout.partition_of`: the partition whose placement key the encoding stage ships with each record,
where Spark's repartition puts it)."""

from __future__ import annotations

import hashlib
import itertools
import random

import pyarrow as pa

from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink.encoders._change_order import sorted_indices
from s2_sink.encoders._frame import BODY, HEADERS
from tests.sim._scenario import SINGLE_STREAM, Row, Scenario, frame_of, key_of

__all__ = ["by_content", "by_stream_order", "in_change_order", "inputs", "split"]


def split(sc: Scenario, batch: int, run: int) -> list[list[Row]]:
    """How Spark splits the batch's rows in `run` (a replay may split them otherwise, SPARK-28650)."""
    rng = random.Random(f"split-{sc.seed}-{run}-{batch}")
    parts: list[list[Row]] = [[] for _ in range(rng.randint(1, 3))]
    for row in inputs(sc, batch):
        parts[rng.randrange(len(parts))].append(row)
    if sc.order_by:
        return _by_key(sc, parts, rng)
    if sc.profile == "many-streams" and rng.random() < 0.5:
        return _by_stream(parts, rng)
    return parts


def _by_stream(split: list[list[Row]], rng: random.Random) -> list[list[Row]]:
    """The writer's split of a batch whose tasks shared its streams: ``repartition(n, _s2_stream)``, each
    stream's rows in one task, each input partition's rows in their order, the input partitions' blocks
    fetched in any order; half the time each task's rows also ordered by stream (`StreamSplit.grouped`)."""
    n = rng.randint(1, 3)
    blocks: list[list[list[Row]]] = [[[] for _ in split] for _ in range(n)]
    for i, part in enumerate(split):
        for row in part:
            h = hashlib.blake2b((row.stream or "").encode(), digest_size=8).digest()
            blocks[int.from_bytes(h, "big") % n][i].append(row)
    out = []
    for task in blocks:
        rng.shuffle(task)
        out.append([r for block in task for r in block])
    if rng.random() < 0.5:  # rows that outweigh the open chunks' bytes: each task's also ordered by stream
        out = [sorted(rows, key=lambda r: r.stream or "") for rows in out]
    return out


def by_stream_order(parts: list[list[Row]]) -> bool:
    """Whether every task's rows come ordered by target stream (the writer then tells the tasks so:
    `WritePlan.rows_by_stream`)."""
    return all(all((a.stream or "") <= (b.stream or "") for a, b in itertools.pairwise(p)) for p in parts)


def _by_key(sc: Scenario, split: list[list[Row]], rng: random.Random) -> list[list[Row]]:
    """What the writer asks of Spark with ``order_by``: ``repartition(_s2_stream?, _s2_key)`` (a hash of
    the target stream and key over some partition count), then ``sort_changes`` in each partition."""
    parts: list[list[Row]] = [[] for _ in range(rng.randint(1, 3))]
    for row in (r for p in split for r in p):
        stream = (row.stream or SINGLE_STREAM).encode() if sc.routed else b""
        h = hashlib.blake2b(stream + b"\0" + row.headers[0][1], digest_size=8).digest()
        parts[int.from_bytes(h, "big") % len(parts)].append(row)
    for p in parts:
        rng.shuffle(p)  # the order a task fetches its shuffle blocks in is not the input order
    return [in_change_order(sc, p) for p in parts]


def in_change_order(sc: Scenario, rows: list[Row]) -> list[Row]:
    """`sort_changes` of one partition, by its Python twin: a (stream, key)'s changes together (in some
    order of the groups: Spark's is a hash's), each group in change order (`sorted_indices`); the rows as
    they are without ``order_by``."""
    if not sc.order_by or len(rows) < 2:
        return rows
    frame = frame_of(rows, routed=sc.routed, dlq=sc.dlq)
    streams = [(r.stream or SINGLE_STREAM) if sc.routed else "" for r in rows]
    order = [
        pa.array(streams),
        pa.array([key_of(r) for r in rows]),
        pa.array([r.order for r in rows], pa.int64()),
    ]
    indices = sorted_indices(order, frame.column(BODY), frame.column(HEADERS))
    return [rows[i] for i in indices.to_pylist()]


def inputs(sc: Scenario, batch: int) -> tuple[Row, ...]:
    """The rows the writer is handed for `batch` (with ``compact``, before the write tasks compact them)."""
    return sc.changes[batch] if sc.compact else sc.batches[batch]


def by_content(sc: Scenario, batch: int, layout: RecoveryLayout) -> list[list[Row]]:
    """The recovery shuffle: ``repartition(n, placement key)``, each record in partition `partition_of`."""
    parts: list[list[Row]] = [[] for _ in range(layout.partitions)]
    for row in inputs(sc, batch):
        stream = row.stream if row.stream is not None else SINGLE_STREAM
        parts[layout.partition_of(stream, list(row.headers), row.body)].append(row)
    return parts
