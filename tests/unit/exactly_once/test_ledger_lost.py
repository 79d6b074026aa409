"""An exactly-once writer's ledger deleted (or recreated empty) between two starts of its query: the writer
cannot know which micro-batches it committed or left half written, so it stops with `CommitError` naming the
ledger, the sign-in registers that show it had started, and the fix, before writing anything — through
`S2Writer`'s coordinator and ``format("s2")``'s execution planning. Block by block against the lite server."""

from __future__ import annotations

import asyncio
from collections import Counter

import pyarrow as pa
import pytest
from s2_sdk import S2ServerError

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.ledger import forget_created, ledger_stream_name, peek_all
from s2_sink._exactly_once.sink_run import open_sink_run
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext
from s2_sink.config import S2Config
from s2_sink.errors import CommitError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, client, make_basin, read_all, run, trim_behind_base

ROWS = [b"row-%d" % i for i in range(12)]


def _frame(bodies: list[bytes]) -> pa.RecordBatch:
    return pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})


def _written_and_committed(lite: LiteServer, writer_id: str) -> S2Config:
    """Batch 0 written by one task and committed in `writer_id`'s ledger."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=5, create_streams=True)
    spec = WriteSpec.build(cfg, Routing.build(stream="events", stream_column=None, shards=None))
    coord = Coordinator(cfg, writer_id, query_id="q", static_streams=["events"])
    epoch = coord.begin_batch(0)
    assert epoch is not None
    result = write_partition(spec.plan(0, epoch), [_frame(ROWS)], PartitionContext(0, 0, 0, 1, 7))
    coord.commit_batch(0, aggregate(0, result.to_pylist(), 1.0, delivery="exactly-once").end_positions())
    return cfg


def _delete_ledger(lite: LiteServer, basin: str, writer_id: str, *, recreate: bool) -> None:
    """Delete `writer_id`'s ledger stream and wait until the deletion completed (then create it again)."""

    async def go() -> None:
        async with client(lite.endpoint) as s2:
            name = ledger_stream_name(writer_id)
            await s2.basin(basin).delete_stream(name)
            for _ in range(100):  # deletion completes in the background
                try:
                    await s2.basin(basin).stream(name).check_tail()
                except S2ServerError as exc:
                    if exc.code != "stream_deletion_pending":  # gone
                        if recreate:
                            await s2.basin(basin).create_stream(name)
                        return
                await asyncio.sleep(0.05)
            raise AssertionError("the ledger was never deleted")

    run(go())
    forget_created()  # the query starts again in a new driver process


def _bodies(lite: LiteServer, basin: str) -> Counter[bytes]:
    return Counter(bytes(r.body) for r in run(read_all(lite.endpoint, basin, "events")))


@pytest.mark.parametrize("recreate", [False, True], ids=["deleted", "recreated empty"])
def test_a_writer_whose_ledger_is_gone_stops_before_a_replay(lite: LiteServer, recreate: bool) -> None:
    """Batch 0 was written and committed; the ledger stream is deleted (or recreated empty) and the query
    starts again, replaying batch 0 (its Spark commit was lost): the new start stops with CommitError naming
    the ledger, the registers and the fix, and nothing more is in the stream (before: it began batch 0 as a
    new writer, at epoch 1 under its own old fence, so the replay wrote the 12 rows a second time)."""
    cfg = _written_and_committed(lite, "w")
    _delete_ledger(lite, cfg.basin, "w", recreate=recreate)
    again = Coordinator(cfg, "w", query_id="q", static_streams=["events"])
    lost = r"ledger of writer_id 'w' .* is empty.*_s2sink/register/w/.*delete the streams"
    with pytest.raises(CommitError, match=lost):
        again.begin_batch(0)
    assert _bodies(lite, cfg.basin) == Counter(ROWS)


def test_a_format_s2_execution_whose_ledger_is_gone_is_not_planned(lite: LiteServer) -> None:
    """The same through ``format("s2")``: planning the next execution after the ledger was deleted stops with
    the CommitError instead of opening epoch 1 over the old fences."""
    cfg = _written_and_committed(lite, "sink-w")
    _delete_ledger(lite, cfg.basin, "sink-w", recreate=False)
    with pytest.raises(CommitError, match="sign-in registers"):
        open_sink_run(cfg, "sink-w", "q", ["events"])


def test_a_new_writer_and_another_writers_registers_are_not_taken_for_a_lost_ledger(lite: LiteServer) -> None:
    """A writer never started has no registers: it begins as usual, also next to the registers of a writer
    whose id extends its own (``w`` beside ``w/2``)."""
    cfg = _written_and_committed(lite, "w/2")
    fresh = Coordinator(cfg, "w", query_id="q2", static_streams=["other"])
    assert fresh.begin_batch(0) is not None


def test_another_writers_ledger_trimmed_behind_its_base_stops_a_new_identity(lite: LiteServer) -> None:
    """A ledger of another writer trimmed by hand past the records its last state record's ends fold from
    cannot be read whole, so a new identity cannot tell whether it holds its query's batches (it could be
    this writer's before a rename): both front doors stop with a CommitError naming that ledger and the fix,
    as for any other ledger of the basin that cannot be read; a reader's lookup leaves it out."""
    cfg = cfg_for(lite.endpoint, make_basin(lite.endpoint, ["events"]))

    _runtime.run(trim_behind_base(cfg, "other", "q-other"))
    fix = r"writer_id 'other' cannot be read whole.*delete the stream '_s2sink/ledger/other'"
    with pytest.raises(CommitError, match=fix):
        Coordinator(cfg, "new", query_id="q", static_streams=["events"]).begin_batch(0, "run-1")
    with pytest.raises(CommitError, match=fix):
        open_sink_run(cfg, "new-sink", "q", ["events"])
    basin = get_pool().client(cfg).basin(cfg.basin)
    assert "other" not in _runtime.run(peek_all(basin, cfg=cfg, skip_unreadable=True))
