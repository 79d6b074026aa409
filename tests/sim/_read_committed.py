"""The read-committed invariant: a reader bounded by a ledger's committed ends sees exactly the committed
micro-batches' records, never part of one and never a record of a batch past the commit.

The ends are folded from the ledger's records as `CommittedEnds.fetch` (s2_sink/_read/committed.py, through
`Ledger.peek`) folds them: the last state record, the ``ends`` pieces from its base on. It is read straight
from the in-memory store, so checking costs the schedule no steps; `ReadCommittedWatch` checks at every
scheduler step at which some stream moved (the process is quiet there, so the store is consistent).
"""

from __future__ import annotations

from collections import Counter

from s2_sdk._generated.s2.v1 import s2_pb2 as pb

from s2_sink._exactly_once.ledger import LEDGER_PREFIX
from s2_sink._exactly_once.ledger_records import EndsFold, parse_record, record_base
from s2_sink._exactly_once.tags import find_tag, strip_tag
from s2_sink.lite._store import Store
from tests.sim._invariants import Content, Violation, _content, _show, expected, live_streams
from tests.sim._scenario import MIRROR_STREAM, OTHER_PREFIX, OTHER_QUERY_ID, Scenario

__all__ = ["ReadCommittedWatch", "check_read_committed", "committed_ends"]


def _records(store: Store, basin: str, name: str) -> list[pb.SequencedRecord]:
    res = store.stream(basin, name).collect(0, 1 << 30, 1 << 62, None)
    return [pb.SequencedRecord.FromString(r) for r in res.records]


def committed_ends(store: Store, basin: str, ledger: str) -> tuple[int, dict[str, int]] | None:
    """The last committed batch and the stream ends a read-committed reader of `ledger` is bounded by
    (None: no state record yet)."""
    docs: list[tuple[int, dict[str, object]]] = []
    for rec in _records(store, basin, ledger):
        if rec.headers and rec.headers[0].name == b"":
            continue  # a command record (trim, fence)
        docs.append((rec.seq_num, parse_record(rec.body, ledger)))
    last = next(((seq, d) for seq, d in reversed(docs) if d["kind"] != "ends"), None)
    if last is None:
        return None
    base = record_base(last[1], last[0])
    fold = EndsFold()
    for seq, doc in docs:
        if base <= seq <= last[0]:
            fold.add(doc)
    return int(str(last[1]["committed"])), fold.ends


def _prefix(store: Store, basin: str, stream: str, end: int) -> dict[int, Counter[Content]]:
    """Per batch id, the data records a reader sees in ``[0, end)`` of `stream`."""
    out: dict[int, Counter[Content]] = {}
    left, batch = 0, -1
    for rec in _records(store, basin, stream):
        if rec.seq_num >= end:
            if left:
                raise Violation(f"{stream}: the committed end {end} cuts a chunk ({left} records short)")
            break
        headers = [(h.name, h.value) for h in rec.headers]
        if headers and headers[0][0] == b"":
            continue
        if left == 0:
            tag = find_tag(headers)
            if tag is None:
                raise Violation(f"{stream}@{rec.seq_num}: a record outside any tagged chunk")
            left, batch = tag.count, tag.batch
        left -= 1
        out.setdefault(batch, Counter())[_content(stream, strip_tag(headers), rec.body)] += 1
    return out


def check_read_committed(
    store: Store, basin: str, scenario: Scenario, mirror_ledger: str | None = None
) -> None:
    """For every ledger and every data stream: the records below the ledger's committed end are those of
    batches ``<= committed``, each batch's exactly once (``R(b, s)``), nothing of a later batch. In
    ``several-writers``, `mirror_ledger` (the second writer's) answers for `MIRROR_STREAM` alone, every
    other ledger for every other stream; in ``shared-writer``, each query's ledger for its own streams."""
    streams = live_streams(store, basin)
    want = expected(scenario, store)
    for name in sorted(streams):
        if not name.startswith(LEDGER_PREFIX):
            continue
        found = committed_ends(store, basin, name)
        if found is None or found[0] < 0:
            continue
        committed, ends = found
        data = {s for s in streams if not s.startswith("_s2sink/")} | set(ends)
        if scenario.second == "mirror":
            data = {MIRROR_STREAM} if name == mirror_ledger else data - {MIRROR_STREAM}
        if scenario.shared:  # each query's ledger answers for its own streams
            other = name.startswith(LEDGER_PREFIX + OTHER_QUERY_ID)
            data = {s for s in data if s.startswith(OTHER_PREFIX) == other}
        for stream in sorted(data):
            end = ends.get(stream, 0)
            seen = _prefix(store, basin, stream, end) if stream in streams and end > 0 else {}
            for b, got in sorted(seen.items()):
                if b > committed:
                    raise Violation(
                        f"read-committed ({name}, committed {committed}): {stream} below its end {end} "
                        f"holds batch {b}: {_show(got)}"
                    )
            for b in range(min(committed + 1, len(want))):
                rows = Counter({c: n for c, n in want[b].items() if c[0] == stream})
                got = seen.get(b, Counter())
                if got != rows:
                    raise Violation(
                        f"read-committed ({name}, committed {committed}): {stream} below its end {end} has "
                        f"batch {b} as {_show(got)} (missing {_show(rows - got)}, extra {_show(got - rows)})"
                    )


class ReadCommittedWatch:
    """Checks `check_read_committed` whenever a stream's tail moved since the last check."""

    def __init__(
        self, store: Store, basin: str, scenario: Scenario, mirror_ledger: str | None = None
    ) -> None:
        self.store, self.basin, self.scenario = store, basin, scenario
        self.mirror_ledger = mirror_ledger
        self._last: tuple[tuple[str, int, int], ...] = ()
        self.checks = 0

    def __call__(self) -> None:
        basin = self.store.basins.get(self.basin)
        if basin is None:
            return
        streams = basin.streams
        now = tuple((n, id(s), s.tail()[0]) for n, s in sorted(streams.items()))
        if now == self._last:
            return
        self._last = now
        self.checks += 1
        check_read_committed(self.store, self.basin, self.scenario, self.mirror_ledger)
