"""What must hold after every committed micro-batch, read straight from the in-memory S2's streams.

- **Exactly once**: for every committed batch ``b`` and every stream ``s`` (dead-letter stream included),
  the multiset of records tagged with batch ``b`` equals ``R(b, s)``, the records its input produces;
  nothing lost, nothing twice. For a batch not committed yet, what is there is a sub-multiset of
  ``R(b, s)`` (docs/exactly-once.md, *Why it is correct*).
- Every data record is covered by a chunk tag (an untagged record could not be accounted for).
- **Ledger bounded**: every ledger record is at most `LEDGER_RECORD_BOUND` bytes, and the ledger keeps at
  most `LEDGER_RECORDS_BOUND` records past its trim point plus one ``open`` per run since its snapshot, and
  at most as many ``intent`` records (one per batch begun since the snapshot).
- **Upsert order** (``UpsertEncoder(order_by=...)``): for every stream and key, the key's changes in the
  stream, in sequence-number order, are every committed batch's changes of that key in change order
  (``order_by``, then body, then headers; docs/encoding.md *Upsert order*), batch after batch; with
  ``compact=True`` one per key and batch, the last in that order. So the table a reader materializes is the
  one ``order_by`` defines. The multiset check covers the changes themselves.

Records are compared on what the fingerprint covers: stream, headers without the chunk tag (and without
a dead letter's ``s2sink-partition`` and ``s2sink-row-hash``, which say where it was written from), body.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable

from s2_sdk._generated.s2.v1 import s2_pb2 as pb

from s2_sink._exactly_once.ledger import LEDGER_PREFIX
from s2_sink._exactly_once.tags import find_tag, strip_tag
from s2_sink._write.task.dead_letters import DLQ_BATCH, DLQ_ERROR, DLQ_PARTITION, DLQ_ROW_HASH, DLQ_TARGET
from s2_sink.lite._store import Store
from s2_sink.lite._stream import Stream
from tests.sim._changes import CHANGES, ChangeLog, records_under
from tests.sim._scenario import DLQ_STREAM, MIRROR_STREAM, SINGLE_STREAM, Row, Scenario, change_order, key_of

__all__ = [
    "LEDGER_RECORDS_BOUND",
    "LEDGER_RECORD_BOUND",
    "Violation",
    "check_batches",
    "check_ledger",
    "check_upsert_order",
    "compare_upsert_order",
    "duplicates_untagged",
    "expected",
    "held_by",
    "key_changes",
    "live_streams",
]

LEDGER_RECORD_BOUND = 66 * 1024
"""Bytes per ledger record (the ledger splits maps over 64 KiB into pieces)."""
LEDGER_RECORDS_BOUND = 2 * 64 + 1 + 16
"""Records past the ledger's trim point, besides ``open`` records: at most 63 deltas after a snapshot, each
announced by an ``intent`` record, the snapshot, and a few ``ends`` pieces and command records."""

Content = tuple[str, tuple[tuple[bytes, bytes], ...], bytes]
Change = tuple[int, tuple[tuple[bytes, bytes], ...], bytes]
"""A change as a stream holds it: its batch id (from its chunk's tag), headers without the tag, body."""
_PLACEMENT = (DLQ_PARTITION, DLQ_ROW_HASH)


class Violation(AssertionError):
    """An invariant does not hold."""


def _content(stream: str, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> Content:
    hs = list(headers)
    if any(n == DLQ_ERROR for n, _ in hs):
        hs = [(n, v) for n, v in hs if n not in _PLACEMENT]
    return stream, tuple(hs), body


GONE: weakref.WeakKeyDictionary[Store, dict[str, dict[int, Counter[Content]]]] = weakref.WeakKeyDictionary()
"""Per store, the streams deleted (and created again) during the schedule, with what each held of every
batch when it was deleted: those records are gone by the deletion, not by the writer (a batch in flight
may have had some of its records acknowledged there too; they are lost whether it commits or not)."""


def expected(scenario: Scenario, store: Store | None = None) -> list[Counter[Content]]:
    """``R(b, ·)`` for every batch: the records (and dead letters) each batch's input produces, less those
    a deletion of their stream took away."""
    gone = GONE.get(store, {}) if store is not None else {}
    out: list[Counter[Content]] = []
    for b in range(max(len(scenario.batches), len(scenario.shared))):
        rows = scenario.batches[b] if b < len(scenario.batches) else ()
        rows += scenario.shared[b] if b < len(scenario.shared) else ()  # shared-writer: the other query's
        records = [_record_of(scenario, b, r) for r in rows]
        if scenario.second in ("mirror", "unnamed mirror"):  # the second writer: every good row, once
            records += [_content(MIRROR_STREAM, r.headers, r.body) for r in rows if r.error is None]
        want = Counter(records)
        for held in gone.values():
            want -= held.get(b, Counter())
        out.append(want)
    return out


def _record_of(scenario: Scenario, batch: int, row: Row) -> Content:
    target = row.stream if row.stream is not None else SINGLE_STREAM
    if row.error is None:
        return _content(target, row.headers, row.body)
    headers = [
        (DLQ_ERROR, row.error.encode()),
        (DLQ_BATCH, str(batch).encode()),
        (DLQ_TARGET, target.encode()),
    ]
    return _content(DLQ_STREAM, headers, row.body)


def live_streams(store: Store, basin: str) -> dict[str, Stream]:
    """The basin's streams but those being deleted: what a deletion takes is recorded apart (`GONE`), and a
    deleting stream answers nothing but 409 (`tests.sim._operator.spawn_stream_recreator`)."""
    return {n: s for n, s in store.basin(basin).streams.items() if s.deleted_at is None}


def _records(store: Store, basin: str, name: str) -> list[pb.SequencedRecord]:
    stream = store.stream(basin, name)
    res = stream.collect(0, 1 << 30, 1 << 62, None)
    return [pb.SequencedRecord.FromString(r) for r in res.records]


def written(
    store: Store, basin: str, untagged: Counter[Content] | None = None
) -> dict[int, Counter[Content]]:
    """Per batch id, the records of the writer's chunks in every data stream (`held_by`)."""
    out: dict[int, Counter[Content]] = {}
    for stream in live_streams(store, basin).values():
        if stream.name.startswith("_s2sink/"):
            continue
        for batch, held in held_by(store, basin, stream.name, untagged).items():
            out[batch] = out.get(batch, Counter()) + held
    return out


def held_by(
    store: Store, basin: str, name: str, untagged: Counter[Content] | None = None
) -> dict[int, Counter[Content]]:
    """Per batch id, the records of the writer's chunks in data stream `name`. A record outside any tagged
    chunk is a violation, or with `untagged` (a schedule with at-least-once runs) counted there."""
    out: dict[int, Counter[Content]] = {}
    left = 0
    batch = -1
    for rec in _records(store, basin, name):
        headers = [(h.name, h.value) for h in rec.headers]
        if headers and headers[0][0] == b"":
            if left:
                raise Violation(f"{name}@{rec.seq_num}: a command record inside a chunk")
            continue
        if left == 0:
            tag = find_tag(headers)
            if tag is None and untagged is not None:
                untagged[_content(name, headers, rec.body)] += 1
                continue
            if tag is None:
                raise Violation(f"{name}@{rec.seq_num}: a record outside any tagged chunk")
            left, batch = tag.count, tag.batch
        left -= 1
        out.setdefault(batch, Counter())[_content(name, strip_tag(headers), rec.body)] += 1
    if left:
        raise Violation(f"{name}: the last chunk is missing {left} records")
    return out


def check_batches(store: Store, basin: str, scenario: Scenario, committed: int) -> None:
    """Exactly once for batches ``<= committed``; no more than the input for the others (``changed``:
    under the configurations that wrote and committed each batch, `ChangeLog`)."""
    log = CHANGES.get(store)
    if log is not None:
        _check_changed(store, basin, log)
        return
    want = expected(scenario, store)
    have = written(store, basin)
    for b in sorted(have):
        if b >= len(want):
            raise Violation(f"records tagged with batch {b}, which the query never had")
    for b, rows in enumerate(want):
        got = have.get(b, Counter())
        extra = got - rows
        if extra:
            raise Violation(f"batch {b}: written more than once or never input: {_show(extra)}")
        missing = rows - got
        if b <= committed and missing:
            raise Violation(f"batch {b} is committed but misses {_show(missing)}")


def _check_changed(store: Store, basin: str, log: ChangeLog) -> None:
    """``changed``: every batch's tagged records within the rules of `ChangeLog.check`; every batch Spark
    committed after an at-least-once run wrote it, whole among the untagged records and its tagged chunks."""
    untagged: Counter[Content] = Counter()
    have = written(store, basin, untagged)
    for b in sorted(have):
        if b >= len(log.scenario.batches):
            raise Violation(f"records tagged with batch {b}, which the query never had")
    for b in range(len(log.scenario.batches)):
        why = log.check(b, have.get(b, Counter()), "the streams")
        if why is not None:
            raise Violation(why)
    for b, config in sorted(log.alo.items()):
        missing = records_under(log.scenario.batches[b], b, config) - have.get(b, Counter())
        lost = missing - untagged
        if lost:
            raise Violation(f"batch {b}, written at least once ({config.describe()}), lost {_show(lost)}")
        untagged -= missing


def duplicates_untagged(store: Store, basin: str, scenario: Scenario) -> int:
    """The at-least-once control: records written beyond the input, over all batches (its records carry no
    chunk tags); a lost record is a violation even there."""
    want: Counter[Content] = sum(expected(scenario), Counter())
    have: Counter[Content] = Counter()
    for stream in live_streams(store, basin).values():
        for rec in _records(store, basin, stream.name):
            headers = [(h.name, h.value) for h in rec.headers]
            if not (headers and headers[0][0] == b""):
                have[_content(stream.name, headers, rec.body)] += 1
    missing = want - have
    if missing:
        raise Violation(f"at-least-once lost records: {_show(missing)}")
    return sum((have - want).values())


def check_ledger(store: Store, basin: str) -> None:
    """Ledger records and their number past the trim point stay bounded."""
    for stream in live_streams(store, basin).values():
        if not stream.name.startswith(LEDGER_PREFIX):
            continue
        records = _records(store, basin, stream.name)
        opens = intents = 0
        for rec in records:
            size = len(rec.body) + sum(len(h.name) + len(h.value) for h in rec.headers)
            if size > LEDGER_RECORD_BOUND:
                raise Violation(f"ledger record {rec.seq_num} is {size} bytes > {LEDGER_RECORD_BOUND}")
            opens += b'"kind":"open"' in rec.body.replace(b" ", b"")
            intents += b'"kind":"intent"' in rec.body.replace(b" ", b"")
        if len(records) - opens - intents > LEDGER_RECORDS_BOUND or intents > LEDGER_RECORDS_BOUND:
            raise Violation(
                f"the ledger keeps {len(records)} records ({opens} opens, {intents} intents) past its trim "
                "point"
            )


def key_changes(store: Store, basin: str) -> dict[tuple[str, bytes], list[Change]]:
    """Per (data stream, ``@key``), the changes in the stream in sequence-number order."""
    out: dict[tuple[str, bytes], list[Change]] = {}
    for stream in live_streams(store, basin).values():
        if stream.name.startswith("_s2sink/") or stream.name == DLQ_STREAM:
            continue
        left = 0
        batch = -1
        for rec in _records(store, basin, stream.name):
            headers = [(h.name, h.value) for h in rec.headers]
            if headers and headers[0][0] == b"":
                continue  # a command record (a fence)
            if left == 0:
                tag = find_tag(headers)
                if tag is None:
                    raise Violation(f"{stream.name}@{rec.seq_num}: a record outside any tagged chunk")
                left, batch = tag.count, tag.batch
            left -= 1
            content = tuple(strip_tag(headers))
            out.setdefault((stream.name, content[0][1]), []).append((batch, content, rec.body))
    return out


def compare_upsert_order(
    have: dict[tuple[str, bytes], list[Change]], scenario: Scenario, committed: int
) -> None:
    """Every (stream, key)'s changes of batches ``<= committed`` are those `scenario` defines, in that
    order, and none of a later batch comes before them."""
    want: dict[tuple[str, bytes], list[Change]] = {}
    for b, rows in enumerate(scenario.batches[: committed + 1]):
        good = sorted((r for r in rows if r.error is None), key=change_order)
        for r in good:
            stream = r.stream if r.stream is not None else SINGLE_STREAM
            want.setdefault((stream, key_of(r)), []).append((b, r.headers, r.body))
    for where in sorted(set(want) | set(have)):
        changes = have.get(where, [])
        done = [c for c in changes if c[0] <= committed]
        if changes[: len(done)] != done:
            raise Violation(f"{where[0]} key {where[1]!r}: a change of an uncommitted batch precedes {done}")
        if done != want.get(where, []):
            raise Violation(
                f"{where[0]} key {where[1]!r}: changes {done} in the stream, but order_by defines "
                f"{want.get(where, [])}"
            )


def check_upsert_order(store: Store, basin: str, scenario: Scenario, committed: int | None = None) -> None:
    """Per stream and key, the changes in the order ``order_by`` defines, for batches ``<= committed``
    (all of them by default); nothing to check without ``order_by``, whose order is the input's."""
    if not scenario.order_by:
        return
    last = len(scenario.batches) - 1 if committed is None else committed
    compare_upsert_order(key_changes(store, basin), scenario, last)


def _show(c: Counter[Content]) -> str:
    items = sorted(c.items())[:6]
    return ", ".join(f"{n}x {s}:{b!r}{list(h) if h else ''}" for (s, h, b), n in items)
