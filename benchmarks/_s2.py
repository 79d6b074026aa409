"""Driver-side S2 helpers (basin/stream set-up and read-back counts) and the two naive write patterns.

The naive patterns are written the way a user would write them from the SDK docs, not tuned: they are the
baselines s2_sink has to beat.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

__all__ = [
    "TOKEN",
    "count_rows",
    "data_records",
    "data_records_all",
    "ensure",
    "naive_foreach_batch",
    "producer_per_partition",
    "tail",
]

TOKEN = "bench"  # the lite server ignores the token


def _client(endpoint: str) -> Any:
    from s2_sdk import S2, Endpoints

    return S2(TOKEN, endpoints=Endpoints(account=endpoint, basin=endpoint))


def ensure(endpoint: str, basin: str, streams: Sequence[str]) -> None:
    """Create the basin (streams auto-created on append too) and the named streams."""
    from s2_sdk import BasinConfig

    async def go() -> None:
        async with _client(endpoint) as s2:
            await s2.ensure_basin(basin, config=BasinConfig(create_stream_on_append=True))
            b = s2.basin(basin)
            for name in streams:
                await b.ensure_stream(name)

    asyncio.run(go())


def tail(endpoint: str, basin: str, streams: Sequence[str]) -> int:
    """Sum of the streams' tail sequence numbers: the records they hold (none were trimmed)."""

    async def go() -> int:
        async with _client(endpoint) as s2:
            b = s2.basin(basin)
            total = 0
            for name in streams:
                total += (await b.stream(name).check_tail()).seq_num
            return total

    return asyncio.run(go())


def data_records(endpoint: str, basin: str, streams: Sequence[str]) -> int:
    """Records the streams hold, less the command records (an exactly-once writer's fence) at their heads:
    the first 64 records of each stream are read back to tell them apart."""
    from s2_sdk import ReadLimit, SeqNum

    async def go() -> int:
        async with _client(endpoint) as s2:
            b = s2.basin(basin)
            total = 0
            for name in streams:
                st = b.stream(name)
                held = (await st.check_tail()).seq_num
                total += held
                # Writers fence before their first append, so commands sit at the head.
                head = min(held, 64)
                if head:
                    batch = await st.read(start=SeqNum(0), limit=ReadLimit(count=head))
                    total -= sum(1 for r in batch.records if _is_command(r.headers))
            return total

    return asyncio.run(go())


def data_records_all(endpoint: str, basin: str, stream: str) -> int:
    """The stream's data records, read back whole (command records anywhere are left out)."""
    from s2_sdk import ReadLimit, SeqNum

    async def go() -> int:
        async with _client(endpoint) as s2:
            st = s2.basin(basin).stream(stream)
            held, pos, total = (await st.check_tail()).seq_num, 0, 0
            while pos < held:
                batch = await st.read(start=SeqNum(pos), limit=ReadLimit(count=1000))
                if not batch.records:
                    break
                total += sum(1 for r in batch.records if not _is_command(r.headers))
                pos = batch.records[-1].seq_num + 1
            return total

    return asyncio.run(go())


def _is_command(headers: Sequence[tuple[bytes, bytes]]) -> bool:
    # S2 command records carry exactly one header whose name is empty (its value names the command).
    return len(headers) == 1 and headers[0][0] == b""


def list_streams(endpoint: str, basin: str, prefix: str) -> list[str]:
    """Names of the basin's streams that start with `prefix` (for routed or fanned-out writes)."""

    async def go() -> list[str]:
        async with _client(endpoint) as s2:
            names: list[str] = []
            start_after = ""
            while True:
                page = await s2.basin(basin).list_streams(prefix=prefix, start_after=start_after)
                names.extend(s.name for s in page.items)
                if not page.has_more or not page.items:
                    return names
                start_after = page.items[-1].name

    return asyncio.run(go())


def naive_foreach_batch(endpoint: str, basin: str, stream: str) -> Callable[[DataFrame, int], None]:
    """The foreachBatch body most users write first: collect, then unary appends of 1000 records."""
    from s2_sdk import AppendInput, Record

    def write(batch_df: DataFrame, batch_id: int) -> None:
        rows = batch_df.collect()

        async def go() -> None:
            async with _client(endpoint) as s2:
                st = s2.basin(basin).stream(stream)
                for i in range(0, len(rows), 1000):
                    chunk = rows[i : i + 1000]
                    await st.append(AppendInput(records=[Record(body=r.value.encode()) for r in chunk]))

        asyncio.run(go())

    return write


def producer_per_partition(
    endpoint: str, basin: str, stream: str
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The per-partition pattern (for ``mapInArrow``): one SDK Producer per partition, a submit per row."""

    def write(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from s2_sdk import Record

        async def go() -> int:
            n = 0
            # Closing the producer waits until every submitted record is acknowledged.
            async with _client(endpoint) as s2, s2.basin(basin).stream(stream).producer() as producer:
                for batch in batches:
                    for value in batch.column(0).to_pylist():
                        await producer.submit(Record(body=value.encode()))
                        n += 1
            return n

        written = asyncio.run(go())
        yield pa.RecordBatch.from_pydict({"n": [written]})

    return write


def count_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A ``mapInArrow`` function that writes nothing: the cost floor of a Python task."""
    import pyarrow as pa

    n = sum(b.num_rows for b in batches)
    yield pa.RecordBatch.from_pydict({"n": [n]})
