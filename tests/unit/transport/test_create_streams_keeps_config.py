"""``create_streams`` creates what is missing and never changes the configuration of a stream that exists.

On S2, ensuring a stream (``PUT /v1/streams/{name}``) that exists sets its config to the one asked for merged
with the basin's defaults (s2-lite: lite/src/backend/streams.rs, provision_stream, ProvisionMode::Ensure), so
ensuring it with no config resets one a user made with infinite retention or ``arrival`` timestamps to the
basin's defaults. The sink creates (``POST``) and takes 409 ``resource_already_exists`` as done: the target
streams, the dead-letter stream and the exactly-once bookkeeping streams (ledger, sign-in registers) keep
their config. Block by block against the lite server, no Spark.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from s2_sdk import StreamConfig, Timestamping, TimestampingMode

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.ledger import Ledger, LedgerState, forget_created, ledger_stream_name
from s2_sink._exactly_once.sign_in_registers import REGISTER_PREFIX
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.metrics import aggregate
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext
from s2_sink.config import S2Config
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.faults._support import cfg_for, client, make_basin, run

KEPT = StreamConfig(
    retention_policy="infinite", timestamping=Timestamping(mode=TimestampingMode.ARRIVAL, uncapped=False)
)


def _frame(bodies: list[bytes]) -> pa.RecordBatch:
    return pa.record_batch({"_s2_body": pa.array(bodies, pa.binary())})


def _configs(endpoint: str, basin: str, streams: list[str]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with client(endpoint) as s2:
            b = s2.basin(basin)
            out = {}
            for name in streams:
                cfg = await b.get_stream_config(name)
                ts = cfg.timestamping
                out[name] = (cfg.retention_policy, ts.mode if ts else None, cfg.storage_class)
            return out

    return run(go())


def _configure(endpoint: str, basin: str, names: list[str], config: StreamConfig, *, create: bool) -> None:
    async def go() -> None:
        async with client(endpoint) as s2:
            b = s2.basin(basin)
            for name in names:
                if create:
                    await b.create_stream(name, config=config)
                else:
                    await b.reconfigure_stream(name, config=config)

    run(go())


def _write(cfg: S2Config, delivery: str, batch: int, coord: Coordinator | None = None) -> None:

    routing = Routing.build(stream="events", stream_column=None, shards=None)
    spec = WriteSpec.build(cfg, routing, delivery=delivery)  # type: ignore[arg-type]
    epoch = None
    if coord is not None:
        epoch = coord.begin_batch(batch)
        assert epoch is not None
    plan = spec.plan(batch, epoch) if epoch is not None else spec.plan(batch)
    result = write_partition(
        plan, [_frame([b"r%d" % i for i in range(12)])], PartitionContext(batch, 0, 0, 1, 7)
    )
    if coord is not None:
        metrics = aggregate(batch, result.to_pylist(), 1.0, delivery="exactly-once")
        coord.commit_batch(batch, metrics.end_positions())


def test_a_configured_target_stream_keeps_its_config(lite: LiteServer) -> None:
    """A stream made with infinite retention and arrival timestamps keeps both after an at-least-once and an
    exactly-once write with ``create_streams`` (before: the writer's ensure reset it to the basin's 7-day
    retention and client-prefer timestamps)."""
    basin = make_basin(lite.endpoint)
    _configure(lite.endpoint, basin, ["events"], KEPT, create=True)
    cfg = cfg_for(lite.endpoint, basin, create_streams=True, batch_max_records=5)
    _write(cfg, "at-least-once", 0)
    get_pool().forget_stream(cfg, "events")  # as a new process would: asked of S2 again
    _write(cfg, "exactly-once", 1, Coordinator(cfg, "w", query_id="q", static_streams=["events"]))
    assert _configs(lite.endpoint, basin, ["events"]) == {
        "events": ("infinite", TimestampingMode.ARRIVAL, "express")
    }


def test_the_bookkeeping_streams_keep_their_config(lite: LiteServer) -> None:
    """The ledger and the sign-in registers are created with infinite retention when missing; an operator's
    later change to them (here: arrival timestamps, standard storage) survives a restarted driver's next
    micro-batch (before: the ledger's ensure set it back to the sink's config)."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin, batch_max_records=5)
    _write(cfg, "exactly-once", 0, Coordinator(cfg, "w", query_id="q", static_streams=["events"]))
    ledger = ledger_stream_name("w")
    registers = [s for s in _listed(lite.endpoint, basin) if s.startswith(REGISTER_PREFIX)]
    assert registers
    assert _configs(lite.endpoint, basin, [ledger])[ledger][0] == "infinite"
    changed = StreamConfig(storage_class="standard", timestamping=Timestamping(mode=TimestampingMode.ARRIVAL))
    _configure(lite.endpoint, basin, [ledger, *registers], changed, create=False)
    forget_created()  # the query starts again in a new driver process
    _write(cfg, "exactly-once", 1, Coordinator(cfg, "w", query_id="q", static_streams=["events"]))
    want = ("infinite", TimestampingMode.ARRIVAL, "standard")
    assert _configs(lite.endpoint, basin, [ledger, *registers]) == dict.fromkeys([ledger, *registers], want)


def _listed(endpoint: str, basin: str) -> list[str]:
    async def go() -> list[str]:
        async with client(endpoint) as s2:
            return [s.name async for s in s2.basin(basin).list_all_streams()]

    return run(go())


def test_missing_streams_are_created_together_and_existing_ones_left_alone(lite: LiteServer) -> None:
    """`SessionPool.ensure_streams` creates the missing streams of a batch concurrently (bounded), leaves one
    that exists as it is, and asks S2 once per stream and process."""
    basin = make_basin(lite.endpoint)
    _configure(lite.endpoint, basin, ["s/0"], KEPT, create=True)
    cfg = cfg_for(lite.endpoint, basin)
    names = [f"s/{i}" for i in range(40)]

    async def ensure() -> None:
        await get_pool().ensure_streams(cfg, names)

    _runtime.run(ensure())
    assert sorted(_listed(lite.endpoint, basin)) == sorted(names)
    assert _configs(lite.endpoint, basin, ["s/0"])["s/0"][:2] == ("infinite", TimestampingMode.ARRIVAL)
    _runtime.run(ensure())  # known now: no request


def test_a_ledger_a_reader_created_gets_infinite_retention(lite: LiteServer) -> None:
    """In a basin that creates streams on read, a read-committed reader's check_tail of a ledger that does
    not exist yet creates it with the basin's retention (s2-lite: lite/src/backend/read.rs,
    open_for_check_tail). The writer's first load, finding it empty, sets its retention to infinite (the
    ledger's last record must outlive any stream's fence); the rest of its config is left alone."""
    basin = fresh_basin(lite.endpoint, create_stream_on_read=True)
    cfg = cfg_for(lite.endpoint, basin)

    async def peek_then_load() -> None:
        ledger = Ledger(get_pool().client(cfg).basin(basin), "w", cfg=cfg)
        assert await ledger.peek() == (0, LedgerState())  # the stream now exists, empty
        await ledger.load()

    name = ledger_stream_name("w")
    forget_created()
    _runtime.run(peek_then_load())
    assert _configs(lite.endpoint, basin, [name])[name] == (
        "infinite",
        TimestampingMode.CLIENT_PREFER,
        "express",
    )
