"""The read-committed invariant: a reader bounded by a ledger's committed ends sees exactly the committed
micro-batches' records, never part of one and never a record of a batch past the commit.

The ends are folded from the ledger's records as `CommittedEnds.fetch` (s2_sink/_read/planning/committed.py,
through `Ledger.peek`) folds them: the last state record, the ``ends`` pieces from its base on. It is read
straight from the in-memory store, so checking costs the schedule no steps; `ReadCommittedWatch` checks at
every scheduler step at which some stream moved (the process is quiet there, so the store is consistent).
"""

from __future__ import annotations

from collections import Counter

from s2_sdk._generated.s2.v1 import s2_pb2 as pb

from s2_sink._exactly_once.ledger import LEDGER_PREFIX, ledger_stream_name
from s2_sink._exactly_once.ledger_records import EndsFold, parse_record, record_base
from s2_sink._exactly_once.tags import find_tag, strip_tag
from s2_sink._read.planning.committed import CommittedEnds
from s2_sink.config import S2Config
from s2_sink.lite._store import Store
from tests.sim._changes import CHANGES, ChangeLog
from tests.sim._invariants import Content, Violation, _content, _show, expected, live_streams
from tests.sim._scenario import MIRROR_STREAM, OTHER_PREFIX, OTHER_QUERY_ID, Scenario

__all__ = ["ReadCommittedWatch", "check_read_committed", "check_readers_follow", "committed_ends", "moved_to"]


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


def _prefix(
    store: Store, basin: str, stream: str, end: int, *, untagged: bool = False
) -> dict[int, Counter[Content]]:
    """Per batch id, the data records a reader sees in ``[0, end)`` of `stream` (records outside tagged
    chunks are a violation, or with `untagged`, an at-least-once writer's, left out)."""
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
            if tag is None and untagged:
                continue
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
    log = CHANGES.get(store)
    want = expected(scenario, store) if log is None else []
    for name in sorted(streams):
        if not name.startswith(LEDGER_PREFIX):
            continue
        found = committed_ends(store, basin, name)
        if found is None or found[0] < 0:
            continue
        committed, ends = found
        data = {s for s in streams if not s.startswith("_s2sink/")} | set(ends)
        if log is not None:
            _check_changed(store, basin, log, name, committed=committed, ends=ends, data=data)
            continue
        if scenario.second in ("mirror", "unnamed mirror"):
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


def _check_changed(
    store: Store,
    basin: str,
    log: ChangeLog,
    name: str,
    *,
    committed: int,
    ends: dict[str, int],
    data: set[str],
) -> None:
    """``changed``: below the ledger's ends, only batches ``<= committed``, each within `ChangeLog.check`'s
    rules (exactly its committing configuration's records for a batch the ledger committed); untagged
    records of at-least-once runs are other writers' to a read-committed reader."""
    seen: dict[int, Counter[Content]] = {}
    streams = store.basin(basin).streams
    for stream in sorted(data):
        end = ends.get(stream, 0)
        if stream not in streams or end <= 0:
            continue
        for b, got in _prefix(store, basin, stream, end, untagged=True).items():
            seen[b] = seen.get(b, Counter()) + got
    for b, got in sorted(seen.items()):
        if b > committed:
            raise Violation(
                f"read-committed ({name}, committed {committed}): batch {b} below its ends: {_show(got)}"
            )
    for b in range(min(committed + 1, len(log.scenario.batches))):
        why = log.check(b, seen.get(b, Counter()), f"read-committed ({name}, committed {committed})")
        if why is not None:
            raise Violation(why)


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


def check_readers_follow(store: Store, cfg: S2Config) -> None:
    """At the end of a schedule that finished: a reader bound to any ledger of the basin — an identity the
    query wrote under before a rename or a take-over included — reads up to the commits of the ledger that
    holds that identity's batches now (the real `CommittedEnds`, following ``moved_to``), never stopping at
    an old ledger's last commit."""
    streams = store.basin(cfg.basin).streams
    for name in sorted(n for n in streams if n.startswith(LEDGER_PREFIX)):
        writer_id = name[len(LEDGER_PREFIX) :]
        if committed_ends(store, cfg.basin, name) is None:
            continue  # an identity that never recorded a state (a racer that lost before its first)
        reader = CommittedEnds(cfg, writer_id)
        ends = reader.fetch()
        current = ledger_stream_name(reader.current)
        if moved_to(store, cfg.basin, current) is not None:
            raise Violation(
                f"a reader bound to {writer_id!r} stops at {reader.current!r}, which was taken over"
            )
        found = committed_ends(store, cfg.basin, current)
        assert found is not None
        if ends != found[1]:
            raise Violation(f"a reader bound to {writer_id!r} reads up to {ends}, not {current}'s {found[1]}")


def moved_to(store: Store, basin: str, ledger: str) -> str | None:
    """The ``moved_to`` of a ledger's last state record (None: not taken over, or no state yet)."""
    last = None
    for rec in _records(store, basin, ledger):
        if not (rec.headers and rec.headers[0].name == b""):
            doc = parse_record(rec.body, ledger)
            last = doc if doc["kind"] != "ends" else last
    return None if last is None else last.get("moved_to")
