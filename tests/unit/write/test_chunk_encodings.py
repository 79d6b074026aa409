"""The writer's two encodings of a chunk against the lite server: Arrow slices serialized in bulk (a batch of
good records for the one fixed stream) and SDK records serialized by the SDK's own mapping (routed rows,
bad rows, a recovering task), both on the same kind of session. The official SDK reads back the same
records, headers and timestamps, cut into the same chunks, with the same tags and totals."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from s2_sdk import S2, AppendInput, CommandRecord, Endpoints

from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin
from tests.integration._s2read import read_stream
from tests.unit.write.test_partition_writer import RecordingTagger, config, ctx, frame, stream_rows

MAX_RECORD = 1024 * 1024


def rows(n: int) -> tuple[list[bytes], list[list[tuple[bytes, bytes]] | None], list[int]]:
    """Empty bodies, bodies of a few KiB, one near the 1 MiB limit; no, one or several headers with
    non-ASCII names and binary values; client timestamps (past and increasing: S2 keeps them monotonic)."""
    bodies = [b"" if i % 17 == 0 else f"{i}:".encode() + bytes([i % 256]) * (i * 53 % 5000) for i in range(n)]
    bodies[n // 2] = b"x" * (MAX_RECORD - 200)
    headers: list[list[tuple[bytes, bytes]] | None] = [
        None if i % 3 == 0 else [("ключ".encode(), bytes([0, 255, i % 256])), (b"@action", b"u")][: i % 3]
        for i in range(n)
    ]
    headers[1] = [(b"empty value", b""), (b"\xff\x00", b"\x00")]
    stamps = [1_600_000_000_000 + 7 * i for i in range(n)]
    return bodies, headers, stamps


def write(
    lite: LiteServer, basin: str, stream: str, batches: list[pa.RecordBatch], *, bulk: bool = True, **kw: Any
) -> dict[str | None, dict[str, Any]]:
    """Write `batches` as one partition to `stream`; the result rows by stream. ``bulk=False`` routes every
    row to `stream` by a column, which takes the SDK record encoding."""
    tagger = kw.pop("tagger", None)
    if not bulk:
        batches = [b.append_column("_s2_stream", pa.array([stream] * b.num_rows)) for b in batches]
    plan = WritePlan(
        cfg=config(lite, basin, **kw),
        batch_id=3,
        stream=stream if bulk else None,
        stream_column=None if bulk else "_s2_stream",
        chunk_tagger=tagger,
        chunk_tag_reserve=64 if tagger is not None else 0,
        on_error="skip",
    )
    return stream_rows(write_partition(plan, batches, ctx(3)))


def back(lite: LiteServer, basin: str, stream: str) -> list[tuple[bytes, list[tuple[bytes, bytes]], int]]:
    return [
        (r.body, [(name, value) for name, value in r.headers], r.timestamp)
        for r in read_stream(lite.endpoint, basin, stream)
    ]


def split(batch: pa.RecordBatch, sizes: list[int]) -> list[pa.RecordBatch]:
    out, start = [], 0
    for size in sizes:
        out.append(batch.slice(start, size))
        start += size
    return out


def test_bulk_encoding_writes_what_the_record_encoding_writes(lite: LiteServer, basin: str) -> None:
    """Record for record (bodies, headers incl. the chunk tag, timestamps), the same chunks (chunk
    infos the tagger saw, chunk boundaries across Arrow batches) and the same result rows."""
    bodies, headers, stamps = rows(2300)
    batches = split(frame(bodies, headers=headers, timestamps=stamps), [1, 640, 999, 660])
    basins = {True: basin, False: fresh_basin(lite.endpoint)}
    tags = {True: RecordingTagger(), False: RecordingTagger()}
    results = {
        bulk: write(
            lite,
            basins[bulk],
            "s",
            batches,
            tagger=tags[bulk],
            bulk=bulk,
            batch_max_records=300,
            flush_buffer_bytes=200_000,
        )["s"]
        for bulk in (True, False)
    }
    got = {bulk: back(lite, basins[bulk], "s") for bulk in (True, False)}
    assert got[True] == got[False]
    assert tags[True].seen == tags[False].seen
    assert len(tags[True].seen) > 8  # cut by count, by bytes and across batches
    drop = ("partition", "attempt", "duration_ms", "latencies_ms")
    assert {k: v for k, v in results[True].items() if k not in drop} == {
        k: v for k, v in results[False].items() if k not in drop
    }
    assert (results[True]["records"], results[True]["end_seq"]) == (2300, 2300)
    # And what was read back is exactly the frame, each chunk's tag last on its first record.
    expected = [(b, list(h or []), t) for b, h, t in zip(bodies, headers, stamps, strict=True)]
    first = 0
    for chunk in tags[True].seen:
        expected[first][1].append((b"@tag", f"s:{chunk.index}:{chunk.record_count}".encode()))
        first += chunk.record_count
    assert got[True] == expected


def test_a_chunk_of_good_batches_and_a_batch_with_bad_rows(lite: LiteServer, basin: str) -> None:
    """An all-good batch (Arrow slices) and a batch with a skipped bad row (SDK records) share a chunk:
    it goes out whole, in row order, as routed rows do."""
    good = frame([f"g{i}".encode() for i in range(5)], headers=[[(b"h", b"1")]] * 5)
    bad = frame([b"b0", None, b"b2"], headers=[None, None, [(b"h", b"2")]])
    for bulk in (True, False):
        result = write(lite, basin, f"mixed-{bulk}", [good, bad, good], bulk=bulk)
        assert result[None]["skipped"] == 1
        assert result[f"mixed-{bulk}"]["appends"] == 1
    # (No client timestamps: S2 stamps the arrival times, which differ.)
    got = {bulk: [(b, h) for b, h, _ in back(lite, basin, f"mixed-{bulk}")] for bulk in (True, False)}
    assert got[True] == got[False]
    assert [b for b, _ in got[True]] == [
        *[f"g{i}".encode() for i in range(5)],
        b"b0",
        b"b2",
        *[f"g{i}".encode() for i in range(5)],
    ]


@dataclass
class AdoptToken:
    """A fence keeper that adopts the stream's current token (what `EpochPlan.keeper` does for a newer
    generation of its own run), remembering each call."""

    calls: list[tuple[str, str]] = field(default_factory=list)

    async def __call__(self, stream: str, current: str) -> str:
        self.calls.append((stream, current))
        return current


def test_a_412_re_sends_the_same_records_under_the_new_token(lite: LiteServer, basin: str) -> None:
    """Appends refused for their fencing token are re-sent with the keeper's token: every record lands
    once, in order, with the chunk tags the first attempt computed."""

    async def fence() -> None:
        async with S2("test", endpoints=Endpoints(account=lite.endpoint, basin=lite.endpoint)) as s2:
            stream = s2.basin(basin).stream("fenced")
            await stream.append(AppendInput(records=[CommandRecord.fence("gen-2")]))

    asyncio.run(fence())
    keeper = AdoptToken()
    tagger = RecordingTagger()
    bodies = [str(i).encode() for i in range(1000)]
    plan = WritePlan(
        cfg=config(lite, basin, batch_max_records=100),
        batch_id=0,
        stream="fenced",
        fencing_token="gen-1",
        fence_keeper=keeper,
        chunk_tagger=tagger,
        chunk_tag_reserve=64,
    )
    result = stream_rows(
        write_partition(plan, split(frame(bodies), [250, 750]), PartitionContext(0, 0, 0, 0, 0))
    )
    assert keeper.calls == [("fenced", "gen-2")]
    assert result["fenced"]["records"] == 1000
    got = read_stream(lite.endpoint, basin, "fenced")
    assert [r.body for r in got] == bodies
    assert [h for r in got for h in r.headers] == [(b"@tag", f"fenced:{i}:100".encode()) for i in range(10)]
