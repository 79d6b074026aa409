"""A seeded scenario: the query (front door, streams, dead letters, upsert), its input, and the fault budget.

Everything a schedule does follows from its seed: this module draws the scenario from it, and the
scheduler (seeded too) draws the interleaving and the faults. Schedules are kept small (a few micro-batches
of a few rows over one to three partitions) so thousands of them run in a minute; small appends (one to
three records each) make every task write several chunks.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import pyarrow as pa

from s2_sink._write.driver.routing import STREAM_COLUMN
from s2_sink.encoders._frame import BODY, ERROR, HEADERS, HEADERS_ARROW_TYPE, PAYLOAD

if TYPE_CHECKING:
    from tests.sim._changes import RunConfig

__all__ = [
    "MIRROR_STREAM",
    "MIRROR_WRITER",
    "OTHER_PREFIX",
    "OTHER_QUERY_ID",
    "PROFILES",
    "Profile",
    "Row",
    "Scenario",
    "change_order",
    "compacted",
    "frame_of",
    "key_of",
]

Profile = Literal[
    "default",
    "stage-retries",
    "long",
    "upsert-order",
    "task-zombies",
    "stage-zombies",
    "renamed",
    "cleared-fence",
    "zombie-takeover",
    "recreated",
    "retry-readback",
    "several-writers",
    "shared-writer",
    "foreign-writer",
    "ledger-reset",
    "changed",
    "two-drivers",
    "named-writers",
    "unreadable-run-id",
    "many-streams",
]
PROFILES: tuple[Profile, ...] = (
    "default",
    "stage-retries",
    "long",
    "upsert-order",
    "task-zombies",
    "stage-zombies",
    "renamed",
    "cleared-fence",
    "zombie-takeover",
    "recreated",
    "retry-readback",
    "several-writers",
    "shared-writer",
    "foreign-writer",
    "ledger-reset",
    "changed",
    "two-drivers",
    "named-writers",
    "unreadable-run-id",
    "many-streams",
)
"""``stage-retries`` adds shuffle fetch failures: Spark retries the stage, attempt numbers restart at 0
(SPARK-24552) and the old stage attempt's tasks go on as zombies. ``long`` runs 66 to 75 micro-batches of
one or two rows, past the ledger's first snapshot and trim (every 64th commit), with few faults.
``upsert-order`` writes changelogs with ``UpsertEncoder(order_by=...)`` (``compact`` in half of them) through
``foreachBatch(S2Writer)``, the only front door that takes ``order_by``: a few keys, several changes per key
spread over the input partitions, tied positions and deletes, with stage retries among the faults.
``task-zombies`` and ``stage-zombies`` keep superseded attempts appending: batches of 12 to 20 rows, one
record per append (each task appends several times), the drivers without faults. In ``task-zombies``
attempts are lost to Spark at their first data append and go on (a task retry while the first attempt
still appends); in ``stage-zombies`` one or two shuffle fetch failures at a later data append retry the
stage (attempt numbers restart at 0 while the old attempts have written some records and still append).
``renamed`` is ``default`` through ``foreachBatch(S2Writer)`` with at least one restart, where a restart
with a new writer object names a new ``writer_id`` (the new identity takes over the old one's ledger).
``cleared-fence`` is ``task-zombies`` with an operator who clears the fence of the first stream a retry put
its barrier on (``s2-sink fences clear``), while the superseded attempt may still append.
``zombie-takeover`` is ``cleared-fence`` where an attempt lost to Spark stalls (a GC pause, a partition)
until the operator cleared its retry's barrier, then goes on: its next append meets an empty token that
names nobody, the path only the zombie check (reading the fences back) guards. ``recreated`` is
``default`` (at least two batches) where a target stream batch 0 wrote is deleted once batch 0 commits and
a later batch creates it again, empty. ``retry-readback`` is ``task-zombies`` with two to six rows a batch:
a lost attempt often ends before its retry's barrier, and the retry drops all it would write, so only the
read-back end it reports covers the batch's records in the stream. ``several-writers`` is ``default`` through
``foreachBatch`` with a function that calls a second `S2Writer` after the query's own: one to another
destination (`MIRROR_STREAM`, half the schedules), the same object again, or another object with the same
destination (a quarter each, with Spark's run id known, as classic Spark's job group gives it).
``shared-writer`` runs two concurrent ``foreachBatch`` queries (`OTHER_QUERY_ID` too) with one `S2Writer`
object (a stream column, no dead letters: each query's rows go to streams of its own), their batches
interleaved, each restarted in the same process with the same object after a failure. ``foreign-writer``
is ``default`` (both front doors) with another exactly-once identity fencing a stream the query writes to:
as soon as it holds a record, or once the first micro-batch is committed (`foreign_after_commit`, half the
schedules). ``ledger-reset`` is ``default`` (at least two batches) whose first driver run dies right after
its ledger commit of batch 0 (before Spark's, half the schedules) or right after Spark's, and whose ledger
stream is deleted before the query starts again (an operator, or ``delete_on_empty`` on the basin)."""

ROUTED_STREAMS = ("r-a", "r-b", "r-c")
MANY_STREAMS = tuple(f"m-{i:03d}" for i in range(300))
"""``many-streams``: the stream column's values (a batch's rows touch a hundred of them or more)."""
SINGLE_STREAM = "events"
DLQ_STREAM = "dead"
OTHER_QUERY_ID = "query-2"
"""``shared-writer``: the second query's id; its rows go to streams named ``q2-...``."""
OTHER_PREFIX = "q2-"
MIRROR_STREAM = "mirror"
"""``several-writers``: the second writer's stream (every good row of every batch, once)."""
MIRROR_WRITER = "mirror-writer"
"""``several-writers``: the second writer's ``writer_id`` (a query's writers are told apart by it)."""
KEY = b"@key"
ACTION = b"@action"


@dataclass(frozen=True, slots=True)
class Row:
    """One row of a micro-batch's record frame."""

    body: bytes
    stream: str | None = None
    """The routed target: a stream of the stream column, or a shard (None: the writer's one stream)."""
    headers: tuple[tuple[bytes, bytes], ...] = ()
    error: str | None = None
    """An encoder error: the row becomes a dead letter."""
    order: int | None = None
    """``upsert-order`` only: the change's ``order_by`` value (a CDC log position; ties are common)."""
    column: str | None = None
    """``changed`` only: the row's value in the stream column, its target when the writer routes by it."""


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    profile: Profile
    front: Literal["writer", "sink"]
    """``foreachBatch(S2Writer)`` (a run per start of the query, replays laid out by content) or
    ``format("s2")`` (an epoch per micro-batch execution, replays keep Spark's partitioning)."""
    routed: bool
    """Rows carry their target stream (a stream column, or shards)."""
    shards: int | None
    """``shards=N`` over the one stream (static targets ``events/0`` …), else a stream column."""
    dlq: bool
    upsert: bool
    batches: tuple[tuple[Row, ...], ...]
    shuffle_partitions: int
    batch_max_records: int
    run_id_known: bool
    """Whether Spark's run id reaches the writer (pyspark 4.1 sets only the query id)."""
    same_split_on_replay: bool
    """``format("s2")`` only: a restarted query splits a replayed batch as the dead run did."""
    fault_rate: float
    max_faults: int
    max_restarts: int
    order_by: bool = False
    """``UpsertEncoder(order_by=...)``: the writer lays each (stream, key) out in one task, in change
    order."""
    compact: bool = False
    """``UpsertEncoder(compact=True, order_by=...)``: `batches` hold each key's survivor, `changes` the
    input."""
    changes: tuple[tuple[Row, ...], ...] = ()
    """With `compact`, every batch's changes before compaction (what the encoder was given)."""
    shared: tuple[tuple[Row, ...], ...] = ()
    """``shared-writer``: the micro-batches of the other query (`OTHER_QUERY_ID`)."""
    reset_after_spark: bool = False
    """``ledger-reset``: the first run dies after Spark's commit of batch 0 (else right before it)."""
    foreign_after_commit: bool = False
    """``foreign-writer``: the other identity fences a stream only once the first micro-batch is committed."""
    second: Literal["", "mirror", "same object", "same destination", "unnamed mirror"] = ""
    """``several-writers``: what the ``foreachBatch`` function calls after the query's writer
    (``named-writers``: a writer to `MIRROR_STREAM` without a ``writer_id``, until the refusal names both)."""
    second_first: bool = False
    """``named-writers``: once both writers are named, the function calls the mirror writer first."""
    racer_stalls: bool = False
    """``two-drivers``: the first of the two drivers stalls once it has looked at the old ledger."""
    configs: tuple[RunConfig, ...] = ()
    """``changed``: the writer each start of the query runs with (`tests.sim._changes`), in start order."""

    @classmethod
    def draw(cls, seed: int, profile: Profile = "default") -> Scenario:
        if profile == "changed":
            from tests.sim._changes import draw_changed

            return draw_changed(seed)
        if profile == "upsert-order":
            return cls._draw_upsert_order(seed)
        if profile in ("task-zombies", "stage-zombies", "cleared-fence", "zombie-takeover", "retry-readback"):
            return cls._draw_zombies(seed, profile)
        if profile == "recreated":
            base = cls.draw(seed)
            return replace(
                base, profile="recreated", batches=base.batches * 2 if len(base.batches) < 2 else base.batches
            )
        if profile == "ledger-reset":
            base = cls.draw(seed)
            batches = base.batches * 2 if len(base.batches) < 2 else base.batches
            after_spark = random.Random(f"ledger-reset-{seed}").random() < 0.5
            return replace(base, profile="ledger-reset", batches=batches, reset_after_spark=after_spark)
        if profile == "foreign-writer":
            base = cls.draw(seed)
            after = random.Random(f"foreign-writer-{seed}").random() < 0.5
            return replace(base, profile="foreign-writer", foreign_after_commit=after)
        if profile == "shared-writer":
            return cls._draw_shared(seed)
        if profile in ("two-drivers", "named-writers", "unreadable-run-id"):
            from tests.sim._wirings import draw_wiring

            return draw_wiring(seed, profile)
        if profile == "several-writers":
            base = cls.draw(seed)
            pick = random.Random(f"several-writers-{seed}").random()
            second: Literal["mirror", "same object", "same destination"] = (
                "mirror" if pick < 0.5 else "same object" if pick < 0.75 else "same destination"
            )
            # A second writer to another stream, beside the query's own, is told apart from an earlier start's
            # writer by Spark's run id (classic Spark names it in the stream execution thread's name); the
            # calls of one identity twice are refused with or without it.
            known = base.run_id_known or second == "mirror"
            return replace(base, profile="several-writers", front="writer", second=second, run_id_known=known)
        if profile == "many-streams":
            return cls._draw_many(seed)
        if profile == "renamed":
            base = cls.draw(seed)
            return replace(base, profile="renamed", front="writer", fault_rate=max(base.fault_rate, 0.05))
        rng = random.Random(f"scenario-{seed}")
        front: Literal["writer", "sink"] = "sink" if rng.random() < 0.3 else "writer"
        kind = rng.random()
        routed = kind < 0.6
        shards = 2 if kind < 0.2 else None
        dlq = rng.random() < 0.3
        upsert = rng.random() < 0.25
        long = profile == "long"
        count = rng.randint(66, 75) if long else rng.choices((1, 2, 3), weights=(45, 40, 15))[0]
        batches = tuple(
            tuple(
                _row(rng, routed=routed, shards=shards, dlq=dlq, upsert=upsert)
                for _ in range(rng.randint(1, 2 if long else 5))
            )
            for _ in range(count)
        )
        return cls(
            seed=seed,
            profile=profile,
            front=front,
            routed=routed,
            shards=shards,
            dlq=dlq,
            upsert=upsert,
            batches=batches,
            shuffle_partitions=rng.randint(1, 3),
            batch_max_records=rng.randint(1, 3),
            run_id_known=rng.random() < 0.3,
            same_split_on_replay=rng.random() < 0.8,
            fault_rate=0.005 if long else rng.choice((0.02, 0.05, 0.1)),
            max_faults=rng.randint(1, 5),
            max_restarts=rng.randint(1, 3),
        )

    @classmethod
    def _draw_many(cls, seed: int) -> Scenario:
        """``many-streams``: the default draw, routed by a stream column over `MANY_STREAMS` (300), 40 to
        120 rows a batch (a task's rows spread over dozens of streams, past the 64 append sessions a task
        keeps open at times), small appends; Spark splits a batch by target stream half the time
        (`_partitioning.split`), as the writer asks when a batch's tasks share its streams."""
        base = cls.draw(seed)
        rng = random.Random(f"many-streams-{seed}")
        batches = tuple(
            tuple(
                replace(
                    _row(rng, routed=True, shards=None, dlq=base.dlq, upsert=base.upsert),
                    stream=rng.choice(MANY_STREAMS),
                )
                for _ in range(rng.randint(40, 120))
            )
            for _ in range(rng.choices((1, 2, 3), weights=(30, 45, 25))[0])
        )
        return replace(
            base, profile="many-streams", routed=True, shards=None, order_by=False, batches=batches
        )

    @classmethod
    def _draw_shared(cls, seed: int) -> Scenario:
        """``shared-writer``: the default draw, routed by a stream column without dead letters, and the
        other query's batches of the same shape to its own streams."""
        base = cls.draw(seed)
        rng = random.Random(f"shared-writer-{seed}")
        upsert = base.upsert

        def batches(prefix: str) -> tuple[tuple[Row, ...], ...]:
            count = rng.choices((1, 2, 3), weights=(30, 45, 25))[0]
            return tuple(
                tuple(
                    replace(r, stream=prefix + (r.stream or "")[2:])
                    for r in (
                        _row(rng, routed=True, shards=None, dlq=False, upsert=upsert)
                        for _ in range(rng.randint(1, 5))
                    )
                )
                for _ in range(count)
            )

        return replace(
            base,
            profile="shared-writer",
            front="writer",
            routed=True,
            shards=None,
            dlq=False,
            batches=batches("r-"),
            shared=batches(OTHER_PREFIX),
            fault_rate=max(base.fault_rate, 0.05),
            # One object restarted in the process that runs the other query: only Spark's run id tells a
            # restart from a second call (classic Spark names it in the stream execution thread's name).
            run_id_known=True,
        )

    @classmethod
    def _draw_upsert_order(cls, seed: int) -> Scenario:
        rng = random.Random(f"upsert-order-{seed}")
        kind = rng.random()
        routed = kind < 0.6
        shards = 2 if kind < 0.2 else None
        dlq = rng.random() < 0.2
        compact = rng.random() < 0.5
        changes = tuple(
            tuple(_change(rng, routed=routed, shards=shards, dlq=dlq) for _ in range(rng.randint(2, 8)))
            for _ in range(rng.choices((1, 2, 3), weights=(30, 45, 25))[0])
        )
        return cls(
            seed=seed,
            profile="upsert-order",
            front="writer",
            routed=routed,
            shards=shards,
            dlq=dlq,
            upsert=True,
            batches=tuple(compacted(b) for b in changes) if compact else changes,
            shuffle_partitions=rng.randint(1, 3),
            batch_max_records=rng.randint(1, 3),
            run_id_known=rng.random() < 0.3,
            same_split_on_replay=False,
            fault_rate=rng.choice((0.02, 0.05, 0.1)),
            max_faults=rng.randint(1, 5),
            max_restarts=rng.randint(1, 3),
            order_by=True,
            compact=compact,
            changes=changes if compact else (),
        )

    @classmethod
    def _draw_zombies(cls, seed: int, profile: Profile) -> Scenario:
        rng = random.Random(f"zombies-{seed}")
        kind = rng.random()
        routed = kind < 0.5
        shards = 2 if kind < 0.2 else None
        dlq = rng.random() < 0.2
        batches = tuple(
            tuple(
                _row(rng, routed=routed, shards=shards, dlq=dlq, upsert=False)
                for _ in range(rng.randint(2, 6) if profile == "retry-readback" else rng.randint(12, 20))
            )
            for _ in range(rng.randint(1, 2))
        )
        return cls(
            seed=seed,
            profile=profile,
            front="sink" if rng.random() < 0.2 else "writer",
            routed=routed,
            shards=shards,
            dlq=dlq,
            upsert=False,
            batches=batches,
            shuffle_partitions=rng.randint(2, 3),
            batch_max_records=1,
            run_id_known=rng.random() < 0.3,
            same_split_on_replay=True,
            fault_rate=0.6,
            max_faults=rng.randint(3, 5),
            max_restarts=1,
        )

    def describe(self) -> str:
        routing = f"{self.shards} shards" if self.shards else "routed" if self.routed else "one stream"
        kinds = [self.front, routing]
        kinds += ["dlq"] * self.dlq + ["upsert"] * self.upsert
        kinds += ["order_by"] * self.order_by + ["compact"] * self.compact
        kinds += [f"then S2Writer: {self.second}"] * bool(self.second)
        rows = "/".join(str(len(b)) for b in self.batches)
        if self.shared:
            rows += f" and {OTHER_QUERY_ID}'s " + "/".join(str(len(b)) for b in self.shared)
        return (
            f"seed {self.seed} [{self.profile}]: {', '.join(kinds)}; rows per batch {rows}; "
            f"shuffle partitions {self.shuffle_partitions}; {self.batch_max_records} records per append; "
            f"run id {'known' if self.run_id_known else 'unknown'}; fault rate {self.fault_rate} "
            f"(at most {self.max_faults}), at most {self.max_restarts} restarts"
        )


def _row(rng: random.Random, *, routed: bool, shards: int | None, dlq: bool, upsert: bool) -> Row:
    # Few distinct values: identical rows (a legitimate multiset) are common.
    body = b"v%d" % rng.randrange(4)
    stream = rng.choice(ROUTED_STREAMS) if routed else None
    headers: tuple[tuple[bytes, bytes], ...] = ()
    if upsert:
        action = b"delete" if rng.random() < 0.2 else b"put"
        headers = ((KEY, b"k%d" % rng.randrange(3)), (ACTION, action))
    if shards is not None:  # Spark hashes the key (else the body) to a shard; any function of them will do
        stream = f"{SINGLE_STREAM}/{sum(headers[0][1] if headers else body) % shards}"
    error = "unencodable value" if dlq and rng.random() < 0.2 else None
    return Row(body, stream, headers, error)


def _change(rng: random.Random, *, routed: bool, shards: int | None, dlq: bool) -> Row:
    """One change of an ``upsert-order`` changelog: three keys, positions 0 to 5 (so a key's changes tie
    often, and the tie-break on the record's bytes decides), one in five a delete (an empty body)."""
    key = b"k%d" % rng.randrange(3)
    delete = rng.random() < 0.2
    body = b"" if delete else b"v%d" % rng.randrange(3)
    headers = ((KEY, key), (ACTION, b"d" if delete else b"u"))
    stream = rng.choice(ROUTED_STREAMS) if routed else None
    if shards is not None:
        stream = f"{SINGLE_STREAM}/{sum(key) % shards}"
    error = "unencodable value" if dlq and rng.random() < 0.15 else None
    return Row(body, stream, headers, error, order=rng.randrange(6))


def change_order(row: Row) -> tuple[int, bytes, tuple[tuple[bytes, bytes], ...]]:
    """Where a change goes in its key's order, as docs/encoding.md defines it: its ``order_by`` value, then
    its body, then its headers (compared name by name, value by value)."""
    assert row.order is not None
    return row.order, row.body, row.headers


def key_of(row: Row) -> bytes:
    """The change's ``@key`` value (its first header)."""
    return row.headers[0][1]


def compacted(changes: tuple[Row, ...]) -> tuple[Row, ...]:
    """``compact=True`` as `S2Writer`'s write tasks do it (`last_changes`): per (stream, key), the last good
    change by `change_order` survives; so does every bad row, which is ranked apart (a bad last change
    never pushes out the key's last good one)."""
    last: dict[tuple[str | None, bytes], Row] = {}
    for row in changes:
        if row.error is not None:
            continue
        best = last.get((row.stream, key_of(row)))
        if best is None or change_order(row) > change_order(best):
            last[(row.stream, key_of(row))] = row
    survivors = [r for r in changes if r.error is not None or last.get((r.stream, key_of(r))) is r]
    return tuple(survivors)


def frame_of(
    rows: list[Row], *, routed: bool, dlq: bool, payload: bool = False, stream_column: str = STREAM_COLUMN
) -> pa.RecordBatch:
    """The record frame of one partition, as the writer's encoder would hand it to the tasks: with
    `payload`, a bad row's original payload (`S2Writer`'s frame under ``on_error="dlq"``; the row's body
    stands for its JSON); the target stream in `stream_column` when `routed`."""
    return _frame(tuple(rows), routed, dlq, payload, stream_column)


@functools.lru_cache(maxsize=4096)
def _frame(
    rows: tuple[Row, ...], routed: bool, dlq: bool, payload: bool, stream_column: str
) -> pa.RecordBatch:
    # Cached (frames are immutable): retries, replays and other seeds' small partitions repeat, and
    # building Arrow arrays from Python lists was a tenth of a schedule's time.
    columns: dict[str, pa.Array] = {BODY: pa.array([r.body for r in rows], pa.binary())}
    if any(r.headers for r in rows):
        headers = [[{"name": n, "value": v} for n, v in r.headers] or None for r in rows]
        columns[HEADERS] = pa.array(headers, HEADERS_ARROW_TYPE)
    if dlq:
        columns[ERROR] = pa.array([r.error for r in rows], pa.string())
        if payload:
            columns[PAYLOAD] = pa.array([r.body if r.error else None for r in rows], pa.binary())
    if routed:
        columns[stream_column] = pa.array([r.stream for r in rows], pa.string())
    return pa.record_batch(columns)
