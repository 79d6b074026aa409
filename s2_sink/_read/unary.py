"""A small range's records by one unary read (``GET /v1/streams/{stream}/records?seq_num=&count=``), its
request corked with those of the other small ranges a task starts in the same turn of the event loop
(`sdk.get_corked`).

A read session costs a request, a response's headers and its end, and the S2S framing, whatever it carries:
for a stream of a hundred records that was most of what reading it cost. A unary read answers with one
``ReadBatch`` (at most `UNARY_RECORDS` records and 1 MiB), the bytes a session's message holds, so its records
are walked and decoded as a session's are (`session.ReadRun`). What one answer does not cover (records larger
than 1 MiB together) the caller reads on with a session.

As S2 answers a unary read (``lite/src/handlers/v1/records.rs``, ``read``; ``backend/read.rs``): it never
waits (no ``wait``), so it ends at the tail it saw; a start below the trim point reads what is left, and an
answer with no records means nothing is left from the start to the tail; a start at or past the tail is a
416 (``ReadUnwrittenError``, with the tail). A failure another attempt may fix is retried until the delivery
deadline, as the session's are.
"""

from __future__ import annotations

from typing import Final

import s2_sdk

from s2_sink._read.session import Held, ReadRun
from s2_sink._transport import sdk
from s2_sink._transport.retry import DEFAULT_PATIENCE, Patience, patiently
from s2_sink.config import S2Config

__all__ = ["UNARY_RECORDS", "read_unary"]

UNARY_RECORDS: Final = 1000
"""The most records a unary read answers with (S2's ``RECORD_BATCH_MAX``): a range of at most this many is
read by one (unless its records pass 1 MiB)."""

_ACCEPT: Final = {"accept": "application/x-protobuf"}
"""A protobuf ``ReadBatch`` in answer (the SDK's unary read asks the same)."""


async def read_unary(
    handle: s2_sdk.S2Stream, first: int, count: int, cfg: S2Config | None = None
) -> Held | None:
    """The records from seq_num ``first`` on, at most ``count`` (at most `UNARY_RECORDS`) of them, as far as
    one answer goes, held and not decoded yet (`session.decode_held`); None if the answer has none. Raises
    ``ReadUnwrittenError`` when ``first`` is at or past the tail."""
    transport = sdk.stream_transport(handle)
    path = f"{sdk.stream_records_path(handle.name)}?seq_num={first}&count={min(count, UNARY_RECORDS)}"
    key = sdk.encryption_key(handle)
    headers = _ACCEPT if key is None else {**_ACCEPT, sdk.ENCRYPTION_KEY_HEADER: key}
    patience = DEFAULT_PATIENCE if cfg is None else Patience.of(cfg)

    answer = await patiently(
        patience,
        f"reading {handle.name!r} from seq_num {first}",
        lambda: sdk.get_corked(transport, path, headers),
    )
    run = ReadRun()
    run.add(answer)
    return run.take() if run.records else None
