"""What must hold after every committed micro-batch, read straight from the in-memory S2's streams.

- **Exactly once**: for every committed batch ``b`` and every stream ``s`` (dead-letter stream included),
  the multiset of records tagged with batch ``b`` equals ``R(b, s)``, the records its input produces;
  nothing lost, nothing twice. For a batch not committed yet, what is there is a sub-multiset of
  ``R(b, s)`` (docs/exactly-once.md, *Why it is correct*).
- Every data record is covered by a chunk tag (an untagged record could not be accounted for).
- **Ledger bounded**: every ledger record is at most `LEDGER_RECORD_BOUND` bytes, and the ledger keeps at
  most `LEDGER_RECORDS_BOUND` records past its trim point plus one ``open`` per run since its snapshot.
- **Upsert**: the multiset check covers every change. Change order per key is not checked yet:
  ``UpsertEncoder(order_by=...)`` is being built; `check_upsert_order` is where that check goes.

Records are compared on what the fingerprint covers: stream, headers without the chunk tag (and without
a dead letter's ``s2sink-partition`` and ``s2sink-row-hash``, which say where it was written from), body.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from s2_sdk._generated.s2.v1 import s2_pb2 as pb

from s2_sink._dead_letters import DLQ_BATCH, DLQ_ERROR, DLQ_PARTITION, DLQ_ROW_HASH, DLQ_TARGET
from s2_sink._exactly_once._ledger import LEDGER_PREFIX
from s2_sink._exactly_once._tags import find_tag, strip_tag
from s2_sink.lite._store import Store
from tests.sim._scenario import DLQ_STREAM, SINGLE_STREAM, Row, Scenario

__all__ = [
    "LEDGER_RECORDS_BOUND",
    "LEDGER_RECORD_BOUND",
    "Violation",
    "check_batches",
    "check_ledger",
    "check_upsert_order",
    "duplicates_untagged",
    "expected",
]

LEDGER_RECORD_BOUND = 66 * 1024
"""Bytes per ledger record (the ledger splits maps over 64 KiB into pieces)."""
LEDGER_RECORDS_BOUND = 64 + 1 + 16
"""Records past the ledger's trim point, besides ``open`` records: at most 63 deltas after a snapshot,
the snapshot, and a few ``ends`` pieces and command records."""

Content = tuple[str, tuple[tuple[bytes, bytes], ...], bytes]
_PLACEMENT = (DLQ_PARTITION, DLQ_ROW_HASH)


class Violation(AssertionError):
    """An invariant does not hold."""


def _content(stream: str, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> Content:
    hs = list(headers)
    if any(n == DLQ_ERROR for n, _ in hs):
        hs = [(n, v) for n, v in hs if n not in _PLACEMENT]
    return stream, tuple(hs), body


def expected(scenario: Scenario) -> list[Counter[Content]]:
    """``R(b, ·)`` for every batch: the records (and dead letters) each batch's input produces."""
    out: list[Counter[Content]] = []
    for b, rows in enumerate(scenario.batches):
        out.append(Counter(_record_of(scenario, b, r) for r in rows))
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


def _records(store: Store, basin: str, name: str) -> list[pb.SequencedRecord]:
    stream = store.stream(basin, name)
    res = stream.collect(0, 1 << 30, 1 << 62, None)
    return [pb.SequencedRecord.FromString(r) for r in res.records]


def written(store: Store, basin: str) -> dict[int, Counter[Content]]:
    """Per batch id, the records of the writer's chunks in every data stream."""
    out: dict[int, Counter[Content]] = {}
    for stream in store.basin(basin).streams.values():
        if stream.name.startswith("_s2sink/"):
            continue
        left = 0
        batch = -1
        for rec in _records(store, basin, stream.name):
            headers = [(h.name, h.value) for h in rec.headers]
            if headers and headers[0][0] == b"":
                if left:
                    raise Violation(f"{stream.name}@{rec.seq_num}: a command record inside a chunk")
                continue
            if left == 0:
                tag = find_tag(headers)
                if tag is None:
                    raise Violation(f"{stream.name}@{rec.seq_num}: a record outside any tagged chunk")
                left, batch = tag.count, tag.batch
            left -= 1
            content = _content(stream.name, strip_tag(headers), rec.body)
            out.setdefault(batch, Counter())[content] += 1
        if left:
            raise Violation(f"{stream.name}: the last chunk is missing {left} records")
    return out


def check_batches(store: Store, basin: str, scenario: Scenario, committed: int) -> None:
    """Exactly once for batches ``<= committed``; no more than the input for the others."""
    want = expected(scenario)
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


def duplicates_untagged(store: Store, basin: str, scenario: Scenario) -> int:
    """The at-least-once control: records written beyond the input, over all batches (its records carry no
    chunk tags); a lost record is a violation even there."""
    want: Counter[Content] = sum(expected(scenario), Counter())
    have: Counter[Content] = Counter()
    for stream in store.basin(basin).streams.values():
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
    for stream in store.basin(basin).streams.values():
        if not stream.name.startswith(LEDGER_PREFIX):
            continue
        records = _records(store, basin, stream.name)
        opens = 0
        for rec in records:
            size = len(rec.body) + sum(len(h.name) + len(h.value) for h in rec.headers)
            if size > LEDGER_RECORD_BOUND:
                raise Violation(f"ledger record {rec.seq_num} is {size} bytes > {LEDGER_RECORD_BOUND}")
            opens += b'"kind":"open"' in rec.body.replace(b" ", b"")
        if len(records) - opens > LEDGER_RECORDS_BOUND:
            raise Violation(f"the ledger keeps {len(records)} records ({opens} opens) past its trim point")


def check_upsert_order(store: Store, basin: str, scenario: Scenario) -> None:
    """Per key, changes in the order ``order_by`` defines. A hook: ``UpsertEncoder(order_by=...)`` is not
    built yet and the simulated upsert rows carry no order column, so there is nothing to compare; the
    multiset check (`check_batches`) covers every change meanwhile."""
    del store, basin, scenario


def _show(c: Counter[Content]) -> str:
    items = sorted(c.items())[:6]
    return ", ".join(f"{n}x {s}:{b!r}{list(h) if h else ''}" for (s, h, b), n in items)
