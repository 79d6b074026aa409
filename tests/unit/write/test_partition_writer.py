"""The executor-side write path (no Spark): record frames -> appends on the lite server."""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa
import pytest

from s2_sink._transport import runtime as _runtime
from s2_sink._transport.runtime import get_pool
from s2_sink._write.driver.routing import Routing
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import ChunkInfo, PartitionContext, WritePlan
from s2_sink.config import S2Config
from s2_sink.errors import EncodeError, WriteError
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.integration._s2read import read_stream

HEADERS_TYPE = pa.list_(pa.struct([pa.field("name", pa.binary()), pa.field("value", pa.binary())]))


def frame(
    bodies: list[bytes | None],
    *,
    headers: list[list[tuple[bytes, bytes]] | None] | None = None,
    timestamps: list[int | None] | None = None,
    errors: list[str | None] | None = None,
    streams: list[str | None] | None = None,
) -> pa.RecordBatch:
    """A record frame batch built by hand."""
    n = len(bodies)
    cols: dict[str, pa.Array] = {
        "_s2_body": pa.array(bodies, pa.binary()),
        "_s2_headers": pa.array(
            [None if h is None else [{"name": k, "value": v} for k, v in h] for h in (headers or [None] * n)],
            HEADERS_TYPE,
        ),
        "_s2_timestamp": pa.array(timestamps or [None] * n, pa.int64()),
        "_s2_key": pa.array([None] * n, pa.binary()),
        "_s2_error": pa.array(errors or [None] * n, pa.string()),
    }
    if streams is not None:
        cols["_s2_stream"] = pa.array(streams, pa.string())
    return pa.RecordBatch.from_pydict(cols)


def config(lite: LiteServer, basin: str, **kw: Any) -> S2Config:
    """A config for the session's lite server."""
    return S2Config(
        basin=basin,
        stream="events",
        access_token="test",
        account_endpoint=lite.endpoint,
        basin_endpoint=lite.endpoint,
        **kw,
    )


def ctx(batch_id: int = 0, partition: int = 0) -> PartitionContext:
    """A task identity outside Spark."""
    return PartitionContext(batch_id, partition, 0, 0, 0)


def stream_rows(result: pa.RecordBatch) -> dict[str | None, dict[str, Any]]:
    """Result rows by stream (None = the task's totals)."""
    return {r["stream"]: r for r in result.to_pylist()}


@dataclasses.dataclass
class RecordingTagger:
    """A chunk tagger that remembers every chunk it was asked to tag."""

    seen: list[ChunkInfo] = dataclasses.field(default_factory=list)

    def __call__(self, ctx: PartitionContext, chunk: ChunkInfo) -> tuple[bytes, bytes]:
        self.seen.append(chunk)
        return b"@tag", f"{chunk.stream}:{chunk.index}:{chunk.record_count}".encode()


def test_records_headers_timestamps_round_trip(lite: LiteServer, basin: str) -> None:
    """Bodies, headers and client timestamps arrive unchanged and in order; result rows count them."""
    bodies = [f"r{i}".encode() for i in range(2500)]
    headers = [[(b"k", str(i).encode())] if i % 2 else None for i in range(2500)]
    stamps = [1_700_000_000_000 + i for i in range(2500)]
    plan = WritePlan(cfg=config(lite, basin), batch_id=7, stream="events")
    batch = frame(bodies, headers=headers, timestamps=stamps)
    result = stream_rows(write_partition(plan, [batch.slice(0, 1200), batch.slice(1200)], ctx(7)))
    assert result[None]["rows_in"] == 2500
    assert result["events"]["records"] == 2500
    assert result["events"]["appends"] == 3
    assert result["events"]["end_seq"] == 2500
    back = read_stream(lite.endpoint, basin, "events")
    assert [r.body for r in back] == bodies
    assert [r.headers for r in back][:4] == [[], [(b"k", b"1")], [], [(b"k", b"3")]]
    assert [r.timestamp for r in back][:3] == stamps[:3]


def test_chunking_is_deterministic_and_within_limits(lite: LiteServer, basin: str) -> None:
    """Chunks depend only on the record sequence, not on Arrow batch boundaries, and respect the limits."""
    cfg = config(lite, basin, batch_max_records=300, flush_buffer_bytes=20_000)
    bodies = [bytes(50 + (i * 37) % 400) for i in range(3000)]
    batch = frame(bodies)
    runs = []
    for splits in ([3000], [1, 999, 2000], [7] * 428 + [4]):
        tagger = RecordingTagger()
        plan = WritePlan(cfg=cfg, batch_id=0, stream="events", chunk_tagger=tagger, chunk_tag_reserve=64)
        parts, start = [], 0
        for size in splits:
            parts.append(batch.slice(start, size))
            start += size
        write_partition(plan, parts, ctx())
        runs.append([(c.index, c.record_count, c.metered_bytes) for c in tagger.seen])
    assert runs[0] == runs[1] == runs[2]
    assert sum(count for _, count, _ in runs[0]) == 3000
    assert all(count <= 300 and nbytes <= 20_000 - 64 for _, count, nbytes in runs[0])
    back = read_stream(lite.endpoint, basin, "events")
    tags = [h for r in back for h in r.headers if h[0] == b"@tag"]
    assert len(tags) == 3 * len(runs[0])


def test_routing_by_stream_column_keeps_order(lite: LiteServer, basin: str) -> None:
    """Each row goes to the stream its column names; each stream keeps the rows' order."""
    n = 900
    streams = [f"route/{i % 3}" for i in range(n)]
    plan = WritePlan(cfg=config(lite, basin, max_buffered_requests=2), batch_id=0, stream_column="_s2_stream")
    result = stream_rows(
        write_partition(plan, [frame([str(i).encode() for i in range(n)], streams=streams)], ctx())
    )
    for s in range(3):
        name = f"route/{s}"
        assert result[name]["records"] == n // 3
        got = [int(r.body) for r in read_stream(lite.endpoint, basin, name)]
        assert got == list(range(s, n, 3))


def test_bad_row_fail_names_row_and_reason(lite: LiteServer, basin: str) -> None:
    """on_error='fail' raises EncodeError naming the row, partition, batch and the encoder's reason; a row
    the driver writes (a small micro-batch) is named as the driver's, not as a partition's."""
    plan = WritePlan(cfg=config(lite, basin), batch_id=3, stream="events")
    bad = [frame([b"a", b"", b"c"], errors=[None, "column 'x' is bad", None])]
    with pytest.raises(EncodeError, match=r"row 1 of partition 0 in batch 3: column 'x' is bad"):
        write_partition(plan, bad, ctx(3))
    with pytest.raises(EncodeError, match=r"row 1 of the driver's write in batch 3: column 'x' is bad"):
        write_partition(plan, bad, PartitionContext.on_driver(3, 0))


def test_bad_rows_skip_and_dlq(lite: LiteServer, basin: str) -> None:
    """'skip' counts and drops bad rows; 'dlq' sends the payload with headers describing the error."""
    rows = frame([b"a", b"", b"c", b"d"], errors=[None, "boom", None, None], streams=["s1", "s1", None, "s1"])
    cfg = config(lite, basin)
    skip = WritePlan(cfg=cfg, batch_id=1, stream_column="_s2_stream", on_error="skip")
    assert stream_rows(write_partition(skip, [rows], ctx(1)))[None]["skipped"] == 2
    dlq = WritePlan(
        cfg=cfg,
        batch_id=2,
        stream_column="_s2_stream",
        null_target=Routing.build(stream=None, stream_column="target", shards=None).null_target(),
        on_error="dlq",
        dlq_stream="dead",
    )
    result = stream_rows(write_partition(dlq, [rows], ctx(2)))
    assert result[None]["dead_lettered"] == 2
    assert result["dead"]["records"] == 2
    dead = read_stream(lite.endpoint, basin, "dead")
    assert [dict(r.headers)[b"s2sink-error"] for r in dead] == [
        b"boom",
        b"stream column 'target' is null (the row has no target stream)",
    ]
    assert dict(dead[0].headers)[b"s2sink-batch-id"] == b"2"
    assert [r.body for r in read_stream(lite.endpoint, basin, "s1")] == [b"a", b"d"] * 2


def test_a_null_target_names_the_users_routing_not_the_internal_column() -> None:
    """A null target reads as the user's stream column or template, never as the internal _s2_stream."""
    by_column = Routing.build(stream=None, stream_column="region", shards=None).null_target()
    assert by_column == "stream column 'region' is null (the row has no target stream)"
    by_template = Routing.build(stream=None, stream_column="events/{region}/{day}", shards=None).null_target()
    assert by_template == "stream template 'events/{region}/{day}' has a null column (one of 'region', 'day')"
    assert "_s2_stream" not in by_column + by_template


def test_oversized_record_is_a_bad_row(lite: LiteServer, basin: str) -> None:
    """A record over 1 MiB metered is a bad row (skipped here), never an append error."""
    plan = WritePlan(cfg=config(lite, basin), batch_id=0, stream="events", on_error="skip")
    result = stream_rows(write_partition(plan, [frame([b"ok", bytes(1024 * 1024)])], ctx()))
    assert result[None]["skipped"] == 1
    assert result["events"]["records"] == 1


def test_503s_are_re_sent_on_a_fresh_session(lite: LiteServer, basin: str, lite_faults: Any) -> None:
    """Appends failing with 503 (append sessions get no SDK retries) are re-sent on a fresh session."""
    cfg = config(lite, basin, max_retries=0, retry_delay_ms=10)
    lite_faults.fail_next_appends(2, status=503)
    plan = WritePlan(cfg=cfg, batch_id=0, stream="events")
    result = stream_rows(write_partition(plan, [frame([str(i).encode() for i in range(5000)])], ctx()))
    assert result["events"]["retries"] >= 1
    got = [int(r.body) for r in read_stream(lite.endpoint, basin, "events")]
    assert set(got) == set(range(5000))


def test_retries_exhausted_names_stream_batch_partition(
    lite: LiteServer, basin: str, lite_faults: Any
) -> None:
    """When every retry until the delivery deadline fails, WriteError names the stream, batch and partition
    and the option, and chains the SDK error."""
    cfg = config(lite, basin, max_retries=0, retry_delay_ms=1, delivery_timeout_ms=300)
    lite_faults.fail_next_appends(10_000, status=503)
    plan = WritePlan(cfg=cfg, batch_id=42, stream="events")
    with pytest.raises(
        WriteError,
        match=rf"'events'.*after \d+ session retries: basin '{basin}' at {lite.endpoint} refused the request "
        r"on stream 'events': .*\(HTTP 503, unavailable\); still failing after 0\.\d s of retries, past the "
        r"delivery deadline: .*raise s2\.delivery-timeout-ms .*\(batch 42, partition 5",
    ) as info:
        write_partition(plan, [frame([b"x"] * 10)], ctx(42, 5))
    assert info.value.__cause__ is not None


def test_dropped_connections_are_survived(lite: LiteServer, basin: str, lite_faults: Any) -> None:
    """A dropped connection mid-partition loses nothing (at-least-once)."""
    cfg = config(lite, basin, request_timeout_ms=2000, max_retries=1, batch_max_records=200)
    lite_faults.drop_connections(after_appends=3, times=2)
    plan = WritePlan(cfg=cfg, batch_id=0, stream="events")
    write_partition(plan, [frame([str(i).encode() for i in range(4000)])], ctx())
    got = [int(r.body) for r in read_stream(lite.endpoint, basin, "events")]
    assert set(got) == set(range(4000))


def test_wrong_token_is_a_clear_error() -> None:
    """A refused token fails at once with a message about the token, and never shows the token."""
    with LiteServer(token="right-token") as srv:
        basin = fresh_basin(srv.endpoint, token="right-token")
        cfg = S2Config(
            basin=basin,
            stream="events",
            access_token="wrong-token-value",
            account_endpoint=srv.endpoint,
            basin_endpoint=srv.endpoint,
        )
        plan = WritePlan(cfg=cfg, batch_id=0, stream="events")
        with pytest.raises(
            WriteError,
            match=r"refused the access token \(401 authn\): set S2_ACCESS_TOKEN \(or the s2\.auth-token",
        ) as info:
            write_partition(plan, [frame([b"x"])], ctx())
        assert "wrong-token-value" not in str(info.value)


def test_the_client_is_reused_across_partitions(lite: LiteServer, basin: str) -> None:
    """A second partition to the same stream reuses the process's client (its sessions are new HTTP/2
    streams on the client's warm connection)."""
    plan = WritePlan(cfg=config(lite, basin), batch_id=0, stream="events")
    write_partition(plan, [frame([b"a"])], ctx(0, 0))

    async def stats() -> dict[str, Any]:
        return get_pool().stats()

    before = _runtime.run(stats())
    write_partition(plan, [frame([b"b"])], ctx(0, 1))
    assert _runtime.run(stats())["clients"] == before["clients"]
    assert [r.body for r in read_stream(lite.endpoint, basin, "events")] == [b"a", b"b"]


def test_empty_partition_writes_nothing(lite: LiteServer, basin: str) -> None:
    """An empty partition opens no session and reports zero rows."""
    plan = WritePlan(cfg=config(lite, basin), batch_id=0, stream="never")
    result = stream_rows(write_partition(plan, [frame([])], ctx()))
    assert list(result) == [None]
    assert result[None]["rows_in"] == 0


def test_tight_inflight_limits_keep_order(lite: LiteServer, basin: str) -> None:
    """With one append in flight and a 1 MiB in-flight cap, everything still arrives, in order."""
    cfg = config(lite, basin, max_inflight_requests=1, max_inflight_bytes=1024 * 1024, batch_max_records=250)
    plan = WritePlan(cfg=cfg, batch_id=0, stream="tight")
    result = stream_rows(write_partition(plan, [frame([str(i).encode() for i in range(5000)])], ctx()))
    assert result["tight"]["appends"] == 20
    assert [int(r.body) for r in read_stream(lite.endpoint, basin, "tight")] == list(range(5000))


@pytest.mark.parametrize(("max_inflight", "hand_overs"), [(16, 1), (2, 5), (4, 3)])
def test_chunks_reach_the_event_loop_once_per_arrow_batch(
    lite: LiteServer,
    basin: str,
    monkeypatch: pytest.MonkeyPatch,
    *,
    max_inflight: int,
    hand_overs: int,
) -> None:
    """The chunks an Arrow batch closes reach the event loop in groups (each hop wakes the loop and the
    task thread) of sixteen, or ``max_inflight_requests`` if fewer; every record arrives, in order."""
    hops: list[str] = []
    real_run = _runtime.run

    def counting_run(coro: Any, timeout: float | None = None) -> Any:
        hops.append(coro.__qualname__)
        return real_run(coro, timeout)

    monkeypatch.setattr(_runtime, "run", counting_run)
    stream = f"hops-{max_inflight}"
    cfg = config(lite, basin, batch_max_records=100, max_inflight_requests=max_inflight)
    bodies = [f"r{i}".encode() for i in range(1000)]
    result = stream_rows(
        write_partition(WritePlan(cfg=cfg, batch_id=0, stream=stream), [frame(bodies)], ctx())
    )
    assert result[stream]["appends"] == 10
    appends = [h for h in hops if h.endswith("._append")]
    # Nine chunks close in the batch (the tenth at the end): its hand-overs, then the last one with the drain.
    assert len(appends) == hand_overs + 1
    assert [r.body for r in read_stream(lite.endpoint, basin, stream)] == bodies
