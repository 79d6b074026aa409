"""The ledger's record format: deltas, snapshots, pieces and version 1 records, without a server."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from s2_sink._exactly_once.ledger_records import (
    PIECE_BYTES,
    SNAPSHOT_EVERY,
    EndsFold,
    LedgerState,
    encode_state,
    parse_record,
)
from s2_sink.errors import CommitError

_MIB = 1024 * 1024


def _fold(bodies: list[bytes]) -> EndsFold:
    fold = EndsFold()
    for body in bodies:
        fold.add(parse_record(body, "t"))
    return fold


def _routed(n: int, at: int) -> dict[str, int]:
    return {f"events/customer-{i:06d}/orders": at + i for i in range(n)}


def test_records_stay_far_below_one_mib_at_100k_routed_streams() -> None:
    """A batch that moved 100k routed streams, and a snapshot of 100k: every record is one piece of at
    most PIECE_BYTES (64 KiB) plus a small header, and folding the records gives the map back."""
    ends = _routed(100_000, 10**9)
    prev = LedgerState(kind="open", epoch=3, run="r", committed=41, since=0)
    state = LedgerState(kind="commit", epoch=3, run="r", committed=42, ends=ends)
    delta, placed, snapshot = encode_state(prev, state, at=500)
    assert not snapshot
    assert placed.since == 1
    assert len(delta) > 50  # really split
    assert max(len(b) for b in delta) < PIECE_BYTES + 512 < _MIB // 8
    assert _fold(delta).ends == ends

    full, placed, snapshot = encode_state(replace(prev, since=SNAPSHOT_EVERY - 1), state, at=900)
    assert snapshot
    assert (placed.base, placed.since) == (900, 0)
    assert max(len(b) for b in full) < PIECE_BYTES + 512
    assert _fold(full).ends == ends
    assert orjson.loads(full[-1])["full"] is True


def test_a_commit_records_only_the_streams_its_batch_moved() -> None:
    prev = LedgerState(kind="commit", epoch=1, run="r", committed=0, ends={"a": 5, "b": 7}, since=1)
    state = LedgerState(kind="commit", epoch=1, run="r", committed=1, ends={"a": 5, "b": 9, "c": 1})
    bodies, placed, _ = encode_state(prev, state, at=10)
    assert len(bodies) == 1
    assert orjson.loads(bodies[0])["ends"] == {"b": 9, "c": 1}
    assert placed.since == 2
    opened, _, _ = encode_state(state, LedgerState(kind="open", epoch=2, run="s", ends=state.ends), at=11)
    assert orjson.loads(opened[0])["ends"] == {}


def test_fold_takes_the_latest_end_ignores_orphan_pieces_and_reads_version_1() -> None:
    """Deltas after a snapshot raise ends; pieces whose state record never landed are claimed by nobody;
    a version 1 record (a full snapshot of the old format) folds as a snapshot."""
    v1 = orjson.dumps(
        {"v": 1, "kind": "commit", "epoch": 2, "run": "r", "query_id": "q", "committed": 4, "ends": {"a": 3}}
    )
    orphan = orjson.dumps({"v": 3, "kind": "ends", "ends": {"z": 99}})
    prev = LedgerState(kind="commit", epoch=2, run="r", committed=4, ends={"a": 3})
    big = {**prev.ends, **_routed(3000, 5)}
    bodies, _, _ = encode_state(prev, LedgerState(kind="commit", epoch=2, run="r", committed=5, ends=big), 7)
    fold = _fold([v1, orphan, *bodies])
    assert fold.ends == big
    assert "z" not in fold.ends
    assert fold.since == 1


def test_unreadable_records_are_commit_errors() -> None:
    with pytest.raises(CommitError, match="unreadable"):
        parse_record(b'{"v": 9, "kind": "commit", "ends": {}}', "led")
    with pytest.raises(CommitError, match="unreadable"):
        parse_record(b"not json", "led")
    fold = EndsFold()
    with pytest.raises(CommitError, match="claims 2 ends records"):
        fold.add({"v": 3, "kind": "commit", "parts": 2, "ends": {}})
