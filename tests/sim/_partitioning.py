"""How the simulated Spark splits a micro-batch into write tasks: the input split (which a replay may draw
otherwise, SPARK-28650), the writer's repartition by (stream, key) with ``order_by`` and its sort by (stream,
key, ``order_by``), the rows tied on all three in any order (`spark_sorted`; the tasks put those in order and
compact by the real `in_change_order` and `last_changes`), and a recovery's layout by record content
(`RecoveryLayout.partition_of`: the partition whose placement key the encoding stage ships with each record,
where Spark's repartition puts it)."""

from __future__ import annotations

import hashlib
import itertools
import random

from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from tests.sim._scenario import SINGLE_STREAM, Row, Scenario, key_of

__all__ = ["by_content", "by_stream_order", "inputs", "spark_sorted", "split"]


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
    return [spark_sorted(sc, p, rng) for p in parts]


def spark_sorted(sc: Scenario, rows: list[Row], rng: random.Random) -> list[Row]:
    """`sort_changes` of one partition: a (stream, key)'s changes together (in some order of the groups:
    Spark's is a hash's), by their ``order_by`` value, the rows tied on all of it in any order (the order
    a task fetches its shuffle blocks in is not the input order); the rows as they are without
    ``order_by``."""
    if not sc.order_by:
        return rows
    rows = list(rows)
    rng.shuffle(rows)

    def position(r: Row) -> tuple[str, str, bool, bytes, int]:
        stream = r.stream if sc.routed else ""
        h = hashlib.blake2b((stream or "").encode() + b"\0" + key_of(r), digest_size=8).digest()
        return (h.hex(), stream or "", stream is None, key_of(r), -1 if r.order is None else r.order)

    return sorted(rows, key=position)


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
