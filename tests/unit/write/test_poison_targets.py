"""Poison routing values: a routed target that is no stream rows may go to is a bad row, handled by
``on_error`` where every routed row passes (the task's `FrameInput`), never an append that fails the
micro-batch on every replay. Against the lite server, without Spark."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest

from s2_sink._exactly_once.epoch_plan import epoch_plan, plan_with_layout
from s2_sink._exactly_once.fencing import writer_hash
from s2_sink._exactly_once.recovery_layout import RecoveryLayout
from s2_sink._write.driver.routing import STREAM_COLUMN, Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.errors import EncodeError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, make_basin, read_all, run
from tests.integration._s2read import list_streams, read_stream
from tests.unit.write.test_partition_writer import config, ctx, stream_rows

NOT_UTF8 = b"ok/\xff"
"""A routing value Spark can hold (a binary column cast to string is not checked) and S2 cannot."""

POISON = {
    "": "is not a valid S2 stream name: it is empty",
    "x" * 600: "is not a valid S2 stream name: it is 600 bytes of UTF-8, over S2's limit of 512",
    ".": "is not a valid S2 stream name: S2 refuses '.' and '..'",
    "a\0b": "is not a valid S2 stream name: it contains a NUL character",
    "_s2sink/ledger/w": "is among the sink's exactly-once ledgers and registers (under '_s2sink/')",
}


def _frame(bodies: list[bytes], targets: list[bytes | None]) -> pa.RecordBatch:
    """A routed record frame; targets as raw bytes in a string column, as Spark hands them over."""
    return pa.record_batch(
        {
            "_s2_body": pa.array(bodies, pa.binary()),
            STREAM_COLUMN: pa.array(targets, pa.binary()).view(pa.string()),
        }
    )


def _poison_batch() -> tuple[list[bytes], list[bytes | None]]:
    """Good rows to ``ok/a`` and ``ok/b`` with every kind of poison value among them."""
    poison = [p.encode() for p in POISON] + [NOT_UTF8]
    targets: list[bytes | None] = []
    for i in range(30):
        targets.append(poison[i // 5] if i % 5 == 4 else b"ok/%s" % b"ab"[i % 2 : i % 2 + 1])
    return [b"row-%d" % i for i in range(30)], targets


def _plan(lite: LiteServer, basin: str, **kw: object) -> WritePlan:
    routing = Routing.build(stream=None, stream_column="target", shards=None)
    return WritePlan(
        cfg=config(lite, basin, create_streams=True),
        batch_id=4,
        stream_column=STREAM_COLUMN,
        null_target=routing.null_target(),
        routed_by=routing.routed_by(),
        **kw,  # type: ignore[arg-type]
    )


def test_poison_targets_are_dead_letters_and_good_rows_land(lite: LiteServer, basin: str) -> None:
    """on_error='dlq': every good row lands in its stream, every poison value (empty, over 512 bytes, '.',
    NUL, not UTF-8, a bookkeeping stream) is a dead letter saying why in the sink's words, with the
    value as its target header; nothing reaches the ledger's namespace."""
    bodies, targets = _poison_batch()
    plan = _plan(lite, basin, on_error="dlq", dlq_stream="dead")
    result = stream_rows(write_partition(plan, [_frame(bodies, targets)], ctx(4)))
    assert result[None]["dead_lettered"] == 6
    assert sorted(list_streams(lite.endpoint, basin)) == ["dead", "ok/a", "ok/b"]
    for stream in ("ok/a", "ok/b"):
        want = [b for b, t in zip(bodies, targets, strict=True) if t == stream.encode()]
        assert [r.body for r in read_stream(lite.endpoint, basin, stream)] == want
    dead = read_stream(lite.endpoint, basin, "dead")
    poison = [i for i in range(30) if i % 5 == 4]
    assert [r.body for r in dead] == [bodies[i] for i in poison]
    assert [dict(r.headers)[b"s2sink-target-stream"] for r in dead] == [targets[i] for i in poison]
    reasons = [dict(r.headers)[b"s2sink-error"].decode() for r in dead]
    for (value, reason), got in zip(POISON.items(), reasons, strict=False):
        assert got.startswith(f"routing value {value[:40]!r}")
        assert f"of stream column 'target' {reason}" in got
    assert reasons[-1] == (
        "routing value 'ok/\\udcff' of stream column 'target' is not a valid S2 stream name: "
        "it is not valid UTF-8"
    )


def test_poison_targets_skip_and_fail(lite: LiteServer, basin: str) -> None:
    """on_error='skip' counts poison rows and writes the rest; 'fail' raises EncodeError naming the row,
    the routing column, the value (cut) and the fixes."""
    bodies, targets = _poison_batch()
    skip = _plan(lite, basin, on_error="skip")
    result = stream_rows(write_partition(skip, [_frame(bodies, targets)], ctx(4)))
    assert result[None]["skipped"] == 6
    assert result["ok/a"]["records"] + result["ok/b"]["records"] == 24
    with pytest.raises(EncodeError) as failed:
        write_partition(_plan(lite, basin), [_frame(bodies[:10], targets[:10])], ctx(4))
    assert str(failed.value) == (
        "row 4 of partition 0 in batch 4: routing value '' of stream column 'target' is not a valid S2 "
        "stream name: it is empty (fix or filter such rows, or set on_error='skip' or 'dlq')"
    )
    with pytest.raises(EncodeError, match=r"row 4 .*routing value 'xxxxx.*'\.\.\. \(600 characters\) of"):
        write_partition(_plan(lite, basin), [_frame(bodies[5:10], targets[5:10])], ctx(4))


def test_a_poison_targets_dead_letter_is_written_once_in_a_replay(lite: LiteServer) -> None:
    """Exactly-once: a run dead-letters the poison rows of one partition and dies; the replay, laid out by
    content with the routed target in the hash (poison values included, bytes that are not UTF-8 as
    Spark hashes them), gives those rows to other tasks, which subtract the earlier dead letters and
    write the rest once: every good row once, every poison row's dead letter once."""
    basin = make_basin(lite.endpoint, ["ok/a", "ok/b", "dead"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=4)
    spec = WriteSpec.build(
        cfg,
        Routing.build(stream=None, stream_column="target", shards=None),
        on_error="dlq",
        dlq_stream="dead",
    )
    bodies, targets = _poison_batch()
    layout = RecoveryLayout(partitions=4, routed=True)
    texts = [t.decode("utf-8", "surrogateescape") for t in targets if t is not None]
    owner = [layout.partition_of(t, [], b) for t, b in zip(texts, bodies, strict=True)]
    assert len({owner[i] for i in range(15) if i % 5 == 4}) > 1  # the dead run's letters move

    dead_run = spec.plan(4, epoch_plan(cfg, writer_hash("w"), 1, {}, recovery=False, writer_id="w"))
    write_partition(dead_run, [_frame(bodies[:15], targets[:15])], PartitionContext(4, 0, 0, 0, 0))
    replay = plan_with_layout(
        spec.plan(4, epoch_plan(cfg, writer_hash("w"), 2, {}, recovery=True, writer_id="w")), layout
    )
    for task in range(4):
        mine = [i for i in range(30) if owner[i] == task]
        rows = _frame([bodies[i] for i in mine], [targets[i] for i in mine])
        write_partition(replay, [rows], PartitionContext(4, task, 0, 0, 0))

    def got(stream: str) -> Counter[bytes]:
        return Counter(bytes(r.body) for r in run(read_all(lite.endpoint, basin, stream)))

    poison = {i for i in range(30) if i % 5 == 4}
    assert got("dead") == Counter(bodies[i] for i in poison)
    assert got("ok/a") + got("ok/b") == Counter(bodies[i] for i in range(30) if i not in poison)
