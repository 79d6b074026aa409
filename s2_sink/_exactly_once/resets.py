"""A target stream deleted and recreated under the writer: the check and its error.

Its own module so that the ledger, which readers import, does not import the write side's fencing.
"""

from __future__ import annotations

from collections.abc import Mapping

from s2_sink.errors import StreamResetError

__all__ = ["check_not_reset", "stream_reset"]


def check_not_reset(committed: Mapping[str, int], reported: Mapping[str, int], writer_id: str) -> None:
    """Before a commit: a stream whose acks end below the ledger's end for it was deleted and recreated
    under the micro-batch (`StreamResetError`; the ledger keeps the higher end, which the stream no
    longer has, so recording the batch would put its records behind every reader's committed end)."""
    for stream, end in reported.items():
        if end < committed.get(stream, 0):
            raise stream_reset(stream, committed[stream], end, writer_id)


def stream_reset(stream: str, end: int, tail: int, writer_id: str) -> StreamResetError:
    """The error for a target stream whose tail is below the ledger's committed end for it."""
    return StreamResetError(
        f"exactly-once: stream {stream!r} ends at {tail}, below the end {end} this writer's ledger committed "
        "for it: the stream was deleted and recreated (S2's delete_on_empty after retention, or by hand), "
        "and the records committed before that are gone. The writer cannot tell where the micro-batch's "
        "records start in the new stream, so it stops before writing to it (nothing was written there). "
        "To go on with the new stream, stop the query, make the ledger forget the old end with "
        f"`s2-sink ledger forget {writer_id} {stream}`, and restart: the writer then reads the new stream "
        "from its start"
    )
