"""The S2 calls of read planning: stream listings, creation times, tails, first stored records, timestamps,
and byte measures of a range (driver side; a task's range reads are `s2_sink._read.session`'s).

They run on the process-wide loop and client of ``_transport.runtime``, retried until the delivery
deadline (all are reads); failures surface as ``ReadError`` naming the basin and the streams.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar

import s2_sdk

from s2_sink._read.session import read_error_words
from s2_sink._transport import runtime as _runtime
from s2_sink._transport import sdk
from s2_sink._transport.explain import is_stream_deleting
from s2_sink._transport.retry import Patience, patiently
from s2_sink._transport.runtime import gather_bounded, get_pool
from s2_sink.config import S2Config
from s2_sink.errors import ReadError

__all__ = [
    "LOOKUP_CONCURRENCY",
    "first_seqs",
    "listed_epochs",
    "measure_range",
    "resolve_timestamp",
    "stream_epochs",
    "tails",
]

log = logging.getLogger(__name__)

_T = TypeVar("_T")

LOOKUP_CONCURRENCY: Final = 64
"""Per-stream lookups in flight at once: enough to hide round trips over a thousand streams, few enough
that a listing of a hundred thousand does not open as many requests."""


def _names(streams: Sequence[str], shown: int = 10) -> str:
    """The streams for a message: all of a few, else the first ``shown`` and how many more."""
    if len(streams) <= shown:
        return repr(list(streams))
    return f"{list(streams)[:shown]!r} and {len(streams) - shown} more streams"


def _each(streams: Sequence[str], lookup: Callable[[str], Awaitable[_T]]) -> Awaitable[list[_T]]:
    return gather_bounded((lookup(s) for s in streams), LOOKUP_CONCURRENCY)


def _run(
    cfg: S2Config, what: str, op: Callable[[s2_sdk.S2Basin], Awaitable[_T]], *, retried: bool = True
) -> _T:
    """``op`` on the loop, retried as a whole until the delivery deadline unless it retries its own
    requests."""

    async def main() -> _T:
        # The pool is touched only from the loop, so the client is looked up there.
        basin = get_pool().client(cfg).basin(cfg.basin)
        if not retried:
            return await op(basin)
        return await patiently(Patience.of(cfg), what, lambda: op(basin))

    try:
        return _runtime.run(main())
    except s2_sdk.S2Error as exc:
        words = read_error_words(exc, cfg)
        raise ReadError(f"s2 source: {what} in basin {cfg.basin!r} failed: {words}") from exc


async def _tail_of(transport: sdk.HttpClient, stream: str) -> int:
    # ``S2Stream.check_tail``'s request (``GET .../records/tail``), corked: the lookups of many streams
    # started in one turn of the loop leave in one socket write.
    body = await sdk.get_corked(transport, sdk.stream_records_path(stream) + "/tail")
    return int(json.loads(body)["tail"]["seq_num"])


def _created(info: s2_sdk.StreamInfo) -> str:
    created = info.created_at
    return created.isoformat() if hasattr(created, "isoformat") else str(created)


def listed_epochs(cfg: S2Config, prefix: str) -> dict[str, str]:
    """The live streams under ``prefix``, with their creation times."""

    async def op(basin: s2_sdk.S2Basin) -> dict[str, str]:
        return {info.name: _created(info) async for info in basin.list_all_streams(prefix=prefix)}

    return _run(cfg, f"listing streams with prefix {prefix!r}", op)


async def _epoch_of(basin: s2_sdk.S2Basin, stream: str) -> str | None:
    # Listing sorts by name, so the stream itself is the first name with its own name as prefix.
    page = await basin.list_streams(prefix=stream, limit=1)
    for info in page.items:
        if info.name == stream and info.deleted_at is None:
            return _created(info)
    return None


def stream_epochs(cfg: S2Config, streams: Sequence[str]) -> dict[str, str]:
    """Per live stream, its creation time (a stream deleted and created again gets a new one); streams not
    found are left out."""

    async def op(basin: s2_sdk.S2Basin) -> dict[str, str]:
        found = await _each(streams, lambda s: _epoch_of(basin, s))
        return {s: e for s, e in zip(streams, found, strict=True) if e is not None}

    return _run(cfg, f"looking up the creation time of {_names(streams)}", op)


async def _tail_or_none(transport: sdk.HttpClient, stream: str) -> int | None:
    try:
        return await _tail_of(transport, stream)
    except s2_sdk.S2ServerError as exc:
        if exc.status_code == 404 or is_stream_deleting(exc):
            return None  # gone, or deleted and still being removed (S2 answers 409 until it is gone)
        raise


def tails(cfg: S2Config, streams: Sequence[str], *, missing_ok: bool = False) -> dict[str, int]:
    """The tail (next seq_num to be assigned) of every stream, looked up concurrently.

    ``missing_ok``: leave out streams that no longer exist (deleted between listing and lookup) instead
    of failing.
    """

    patience = Patience.of(cfg)

    async def op(basin: s2_sdk.S2Basin) -> dict[str, int]:
        transport = sdk.stream_transport(basin.stream(streams[0])) if streams else None
        lookup = _tail_or_none if missing_ok else _tail_of

        async def tail(stream: str) -> int | None:
            # Each stream retried on its own: one failed lookup does not repeat a thousand others.
            assert transport is not None
            return await patiently(
                patience, f"checking the tail of {stream!r}", lambda: lookup(transport, stream)
            )

        found = await _each(streams, tail)
        return {s: t for s, t in zip(streams, found, strict=True) if t is not None}

    return _run(cfg, f"checking the tail of {_names(streams)}", op, retried=False)


async def _first_from(basin: s2_sdk.S2Basin, stream: str, start: s2_sdk.SeqNum | s2_sdk.Timestamp) -> int:
    handle = basin.stream(stream)
    try:
        batch = await handle.read(start=start, limit=s2_sdk.ReadLimit(count=1))
    except s2_sdk.ReadUnwrittenError as exc:
        return int(exc.tail.seq_num)  # nothing stored there (empty, all trimmed, or none that late yet)
    if batch.records:
        return int(batch.records[0].seq_num)
    return int((await handle.check_tail()).seq_num)


def first_seqs(cfg: S2Config, streams: Sequence[str]) -> dict[str, int]:
    """Per stream, the first seq_num still stored, or the tail if none is."""

    async def op(basin: s2_sdk.S2Basin) -> dict[str, int]:
        found = await _each(streams, lambda s: _first_from(basin, s, s2_sdk.SeqNum(0)))
        return dict(zip(streams, found, strict=True))

    return _run(cfg, f"finding the first stored record of {_names(streams)}", op)


def measure_range(cfg: S2Config, stream: str, first: int, stop: int, max_bytes: int) -> tuple[int, int]:
    """How far from ``first`` towards ``stop`` ``max_bytes`` metered bytes reach: ``(end, bytes used)``.
    Trimmed records cost nothing: a range that starts in a trimmed gap spans it."""

    async def op(basin: s2_sdk.S2Basin) -> tuple[int, int]:
        handle = basin.stream(stream)
        end, used = first, 0
        # The server applies the byte limit (whole records only), so only what fits is transferred.
        try:
            async with handle.read_session(
                start=s2_sdk.SeqNum(first), limit=s2_sdk.ReadLimit(count=stop - first, bytes=max_bytes)
            ) as session:
                async for batch in session:
                    for record in batch.records:
                        # Trimmed records cost nothing: the batch spans them and its tasks report the loss.
                        if record.seq_num >= stop:
                            return stop, used
                        end, used = record.seq_num + 1, used + s2_sdk.metered_bytes([record])
        except s2_sdk.ReadUnwrittenError:
            return stop, 0  # everything from ``first`` on is gone (as a server that answers 416 puts it)
        if end == first:
            end = await _past_trimmed(handle, first, stop)
        return end, used

    return _run(cfg, f"measuring {stream!r} seq_nums [{first}, {stop})", op)


async def _past_trimmed(handle: s2_sdk.S2Stream, first: int, stop: int) -> int:
    """Where a byte-capped read from ``first`` that returned nothing ends: S2 answers a read below the trim
    point with what is left (``read.rs``: 200, not 416), so the first record kept tells a record too large
    from a trimmed gap."""
    try:
        batch = await handle.read(start=s2_sdk.SeqNum(first), limit=s2_sdk.ReadLimit(count=1))
    except s2_sdk.ReadUnwrittenError:
        return stop  # nothing left at all (as a server that answers 416 there puts it)
    if not batch.records:
        return stop  # everything from ``first`` on was trimmed
    return min(int(batch.records[0].seq_num), stop)


def resolve_timestamp(cfg: S2Config, streams: Sequence[str], timestamp: int) -> dict[str, int]:

    async def op(basin: s2_sdk.S2Basin) -> dict[str, int]:
        found = await _each(streams, lambda s: _first_from(basin, s, s2_sdk.Timestamp(timestamp)))
        return dict(zip(streams, found, strict=True))

    return _run(cfg, f"finding timestamp {timestamp} in {_names(streams)}", op)
