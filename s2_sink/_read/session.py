"""A stream's read session over S2S, its messages held in runs (`ReadRun`) and decoded together on demand
(`decode_held`).

It keeps the SDK's HTTP/2 transport and S2S deframing but decodes the messages in bulk
(`s2_sink._wire.read_batch`), and behaves as the SDK's bounded session does (heartbeats, reconnects,
resume, errors); a small range is one unary read. docs/architecture.md, *Reading, by stage*.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Final, NamedTuple

import s2_sdk
from h2.connection import H2Connection
from h2.settings import SettingCodes

from s2_sink._transport import hyperframe_repr_patch, sdk
from s2_sink._transport.explain import explain
from s2_sink._transport.retry import DEFAULT_PATIENCE, Patience, Retrying
from s2_sink._transport.sdk import (
    AdvisedReconnectLimiter,
    HttpClient,
    Message,
    ReadTimeoutError,
    S2ClientError,
    TransportError,
    parse_error_info,
    read_messages,
    requires_reconnect,
)
from s2_sink._wire.columns import RecordColumns, concat_columns
from s2_sink._wire.read_batch import Skim, Tail, decode_skims, parse_read_batch, skim
from s2_sink.config import S2Config

__all__ = [
    "RUN_BYTES",
    "RUN_RECORDS",
    "UNARY_RECORDS",
    "Arrival",
    "Held",
    "Range",
    "ReadRun",
    "decode_held",
    "read_columns",
    "read_error_words",
    "read_unary",
]

log = logging.getLogger(__name__)

hyperframe_repr_patch.install()  # h2 would hex-encode every DATA frame it receives (see that module)

RUN_RECORDS: Final = 8192
RUN_BYTES: Final = 8 * 1024 * 1024
"""Records are handed out in runs of about this many records (or bytes of messages): a ReadBatch holds at most
1000 records, and decoding several together, then Arrow's JSON reader and the per-batch numpy passes of the
formats, cost less per record on longer runs; each run is also one hand-off from the event loop's thread."""

_HEARTBEAT_TIMEOUT: Final = 20.0  # seconds, as the SDK's session
_MAX_FRAME_SIZE: Final = 1 << 20
"""The DATA frame size a read connection accepts. Every frame costs h2 and the SDK's transport Python work
(parsing, an event, a queue hand-off, a flow-control ack), and at HTTP/2's default of 16 KiB a frame holds
about a hundred records. A ReadBatch is at most 1 MiB, so a frame of 1 MiB carries a whole one. RFC 9113
lets a receiver advertise up to 16 MiB - 1; the windows (10 MiB, the SDK's) still bound what is in flight."""


async def read_columns(
    handle: s2_sdk.S2Stream,
    first: int,
    count: int,
    *,
    run_records: int = RUN_RECORDS,
    run_bytes: int = RUN_BYTES,
    cfg: S2Config | None = None,
) -> AsyncGenerator[Held, None]:
    """The records from seq_num ``first`` on, at most ``count``, in runs of whole messages not decoded yet,
    each handed out at ``run_records`` records or ``run_bytes`` bytes. Ends at the count or the tail, like a
    bounded SDK session; a failed session resumes after the last record, until ``cfg``'s deadline."""
    client = sdk.stream_transport(handle)
    headers = _request_headers(handle)
    retrying: Retrying | None = None  # made on the first failure: a read that never fails needs none
    reconnects = AdvisedReconnectLimiter()
    next_seq, remaining = first, count
    run = ReadRun()  # records already received stay in it across retries: the session resumes after them
    while remaining > 0:
        params = {"seq_num": next_seq, "count": remaining}
        reconnect = False
        try:
            async with client.streaming_request(
                "GET", sdk.stream_records_path(handle.name), params=params, headers=headers
            ) as response:
                if response.status_code != 200:
                    raise parse_error_info(await response.aread(), response.status_code)
                await _advertise_large_frames(client)
                advice_seen = False
                async for message in _within_heartbeats(read_messages(response.aiter_bytes())):
                    if retrying is not None:
                        retrying.progress()
                    if message.reconnect_advised and not advice_seen:  # act on the first advice only
                        advice_seen = True
                        response.retire_connection()
                        reconnect = reconnects.try_acquire_advised_reconnect()
                    next_seq, remaining = _resume_point(run.add(message.body), remaining)
                    if run.records >= run_records or run.size >= run_bytes:
                        yield run.take()
                    if reconnect:
                        break
            if not reconnect:
                break
        except (s2_sdk.S2Error, TransportError) as exc:
            if requires_reconnect(exc):  # the server drains or retired the connection: at once, elsewhere
                if remaining == 0:
                    break
                reconnects.record_reconnect()
                continue
            retrying = retrying or _retrying(handle, first, cfg)
            await retrying.after(exc)
    if run.records:
        yield run.take()


UNARY_RECORDS: Final = 1000
"""The most records a unary read answers with (S2's ``RECORD_BATCH_MAX``): a range of at most this many is
read by one (unless its records pass 1 MiB)."""


async def read_unary(
    handle: s2_sdk.S2Stream, first: int, count: int, cfg: S2Config | None = None
) -> Held | None:
    """The records from ``first`` on, at most ``count`` (<= `UNARY_RECORDS`), as far as one unary read answers
    (a protobuf ``ReadBatch``), held; None if it has none. What it leaves (records past 1 MiB) the caller
    reads with a session. As S2 answers (``lite/src/handlers/v1/records.rs``): it never waits; a start below
    the trim point reads what is left; a start at or past the tail is a 416 (``ReadUnwrittenError``)."""
    transport = sdk.stream_transport(handle)
    path = f"{sdk.stream_records_path(handle.name)}?seq_num={first}&count={min(count, UNARY_RECORDS)}"
    headers = _request_headers(handle, _PROTOBUF)
    retrying: Retrying | None = None  # made on the first failure, as a session's
    while True:
        try:
            answer = await sdk.get_corked(transport, path, headers)
            break
        except Exception as exc:  # noqa: BLE001 - `after` re-raises what is final or past the deadline
            retrying = retrying or _retrying(handle, first, cfg)
            await retrying.after(exc)
    run = ReadRun()
    run.add(answer)
    return run.take() if run.records else None


def _retrying(handle: s2_sdk.S2Stream, first: int, cfg: S2Config | None) -> Retrying:
    patience = DEFAULT_PATIENCE if cfg is None else Patience.of(cfg)
    return Retrying(patience, f"reading {handle.name!r} from seq_num {first}")


def _resume_point(arrival: Arrival, remaining: int) -> tuple[int, int]:
    """Where a session resumes after a message, and how many records it still wants."""
    if arrival.last_seq_num is not None:
        return arrival.last_seq_num + 1, max(remaining - arrival.records, 0)
    if arrival.tail is not None:
        return arrival.tail.seq_num, remaining  # a heartbeat: the server is at the tail
    raise S2ClientError("Read session received an empty batch without a tail")


async def _advertise_large_frames(client: HttpClient) -> None:
    """Advertise `_MAX_FRAME_SIZE` once on each of the client's connections that does not yet."""
    try:
        for conn in sdk.pooled_connections(client):
            h2c = sdk.h2_state(conn)
            if h2c is None or h2c in _advertised:
                continue
            _advertised.add(h2c)
            await sdk.advertise_settings(conn, {SettingCodes.MAX_FRAME_SIZE: _MAX_FRAME_SIZE})
    except AttributeError:  # another SDK's internals: reads still work, on 16 KiB frames
        log.debug("cannot reach the SDK's connections to advertise larger frames", exc_info=True)


_advertised: weakref.WeakSet[H2Connection] = weakref.WeakSet()
"""The HTTP/2 state of connections already told, for as long as they live."""


async def _within_heartbeats(messages: AsyncIterator[Message]) -> AsyncGenerator[Message, None]:
    """``messages``, failing with ReadTimeoutError when none arrives in time. A timeout scope, not
    ``wait_for``, which costs a task per message (Python 3.11)."""
    while True:
        try:
            async with asyncio.timeout(_HEARTBEAT_TIMEOUT):
                message = await anext(messages)
        except StopAsyncIteration:
            return
        except TimeoutError:
            raise ReadTimeoutError("Read session heartbeat timeout") from None
        yield message


_S2S: Final = {"content-type": "s2s/proto"}
_PROTOBUF: Final = {"accept": "application/x-protobuf"}
"""A unary read's answer as a protobuf ``ReadBatch`` (the SDK's unary read asks the same)."""


def _request_headers(handle: s2_sdk.S2Stream, kind: dict[str, str] = _S2S) -> dict[str, str]:
    headers = dict(kind)
    key = sdk.encryption_key(handle)
    if key is not None:
        headers[sdk.ENCRYPTION_KEY_HEADER] = key
    return headers


def read_error_words(exc: BaseException, cfg: S2Config, stream: str | None = None) -> str:
    if isinstance(exc, s2_sdk.ReadUnwrittenError):
        return str(exc)  # a position past the tail: callers look at the cause, it is no failure to explain
    return explain(
        exc, cfg, stream=stream, stream_fix="check s2.stream / s2.streams / s2.stream-prefix"
    ).message


Range = tuple[str, int, int]
"""``(stream, first, stop)``: the records of ``stream`` with ``first <= seq_num < stop`` (planned by
`planning.offsets`, read by `ranges`)."""


class Arrival(NamedTuple):
    """What a message brought: its record count, the last one's seq_num (None without records), its tail."""

    records: int
    last_seq_num: int | None
    tail: Tail | None


class Held(NamedTuple):
    """A run taken and not decoded yet: its parts (walked messages, or records parsed on arrival) in order."""

    parts: tuple[Skim | RecordColumns, ...]
    records: int  # at least one
    last_seq_num: int

    @classmethod
    def of(cls, columns: RecordColumns) -> Held:
        return cls((columns,), len(columns), int(columns.seq_nums[-1]))


def decode_held(runs: Sequence[Held]) -> list[RecordColumns]:
    """Each run's records, decoded together: consecutive walked messages, of one run or several, in one go."""
    decoded: list[RecordColumns] = []
    skims: list[Skim] = []
    for part in (part for run in runs for part in run.parts):
        if isinstance(part, Skim):
            skims.append(part)
            continue
        if skims:
            decoded.append(decode_skims(skims))
            skims = []
        decoded.append(part)
    if skims:
        decoded.append(decode_skims(skims))
    joined = concat_columns(decoded)
    if len(runs) == 1:
        return [joined]
    return _cut(joined, [run.records for run in runs])


def _cut(columns: RecordColumns, sizes: Sequence[int]) -> list[RecordColumns]:
    offsets = columns.header_offsets.tolist()
    out: list[RecordColumns] = []
    lo = 0
    for n in sizes:
        hi = lo + n
        first, headers = offsets[lo], offsets[hi] - offsets[lo]
        out.append(
            RecordColumns(
                columns.seq_nums[lo:hi],
                columns.timestamps[lo:hi],
                columns.bodies.slice(lo, n),
                columns.header_counts[lo:hi],
                columns.names.slice(first, headers),
                columns.values.slice(first, headers),
            )
        )
        lo = hi
    return out


class ReadRun:
    """The records of the messages added since the last `take`, in order."""

    def __init__(self) -> None:
        self._parts: list[Skim | RecordColumns] = []
        self.records = 0
        self.size = 0  # bytes of the messages held
        self._last_seq_num = -1

    def add(self, message: bytes) -> Arrival:
        skimmed = skim(message)
        last = None if skimmed is None else skimmed.last_seq_num()
        if skimmed is None or (skimmed.starts and last is None):  # not canonical: the parser says how
            columns, tail = parse_read_batch(message)
            if len(columns):
                last = int(columns.seq_nums[-1])
                self._hold(columns, len(columns), len(message), last)
            return Arrival(len(columns), last, tail)
        if skimmed.starts:
            assert last is not None
            self._hold(skimmed, len(skimmed.starts), len(message), last)
        return Arrival(len(skimmed.starts), last, skimmed.tail)

    def take(self) -> Held:
        """Every record held (at least one), not decoded yet; the run is then empty."""
        held = Held(tuple(self._parts), self.records, self._last_seq_num)
        self._parts, self.records, self.size = [], 0, 0
        return held

    def _hold(self, part: Skim | RecordColumns, records: int, size: int, last_seq_num: int) -> None:
        self._parts.append(part)
        self._last_seq_num = last_seq_num
        self.records += records
        self.size += size
