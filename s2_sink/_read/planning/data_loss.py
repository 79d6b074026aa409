"""Records a read is due to read that are gone, and what the read does then.

Trimmed records. S2 drops records by retention age and by trim commands; a position saved in a streaming
checkpoint can then point below the first record still stored. Like Kafka's ``failOnDataLoss``, a
streaming read fails by default (``s2.fail-on-data-loss=true``) so the loss cannot go unnoticed, or skips
to the trim point and logs a WARNING (`gap_handler`, called by a task for each gap it finds). A batch read
reads whatever is retained between its bounds, so it ignores gaps.

Recreated streams: streams that are not the ones a streaming checkpoint was reading (deleted and created
again, or a server that lost its data: an in-memory lite server restarted). Positions alone cannot tell:
a recreated stream holding as many records as the checkpoint had read looks exactly like the old one with
nothing new. So the source's offsets carry each stream's creation time (its *epoch*, from the stream
listing) under the key ``""``, which no stream can have (S2 stream names are at least one byte):
``{"": {"orders": "2026-11-27T03:10:00.123456+00:00"}, "orders": 2702}``. Offsets written before epochs
existed have no ``""`` key; for them only a tail below the checkpointed position gives it away.

A stream is *recreated* when its epoch differs from the checkpointed one, or its tail is below the
checkpointed position. Like lost records, that fails the query by default (``s2.fail-on-data-loss=true``):
reading on would silently skip the new stream's first records. With the option false the source reads the
new stream from its first stored record and logs a WARNING (`refuse_or_warn`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Final, Literal

from s2_sink._read.planning.offsets import Offsets
from s2_sink._read.read_options import OPT_FAIL_ON_DATA_LOSS
from s2_sink.errors import ReadError

__all__ = [
    "EPOCHS_KEY",
    "Epochs",
    "GapHandler",
    "LossPolicy",
    "gap_handler",
    "join",
    "positions",
    "recreated",
    "refuse_or_warn",
    "split",
]

log = logging.getLogger(__name__)

LossPolicy = Literal["fail", "warn", "ignore"]
GapHandler = Callable[[int, int], None]
"""Called with ``(first, stop)``: the records ``first <= seq_num < stop`` of the range are gone."""


def gap_handler(basin: str, stream: str, policy: LossPolicy) -> GapHandler:
    """The reaction to a gap in ``stream``'s range under ``policy``."""

    def on_gap(first: int, stop: int) -> None:
        lost = stop - first
        if policy == "fail":
            raise ReadError(
                f"s2 source: {lost} records of stream {stream!r} in basin {basin!r} "
                f"(seq_nums [{first}, {stop})) were trimmed or expired before this query read them. "
                f"Set {OPT_FAIL_ON_DATA_LOSS}=false to skip them and go on from the trim point "
                f"(seq_num {stop}), or lengthen the stream's retention"
            )
        if policy == "warn":
            log.warning(
                "s2 source: data loss: skipped records trimmed or expired before they were read "
                "stream=%s basin=%s lost_records=%d first_lost=%d resumed_at=%d (%s=false)",
                stream,
                basin,
                lost,
                first,
                stop,
                OPT_FAIL_ON_DATA_LOSS,
            )

    return on_gap


EPOCHS_KEY: Final = ""
Epochs = dict[str, str]


def split(raw: Mapping[str, object]) -> tuple[Offsets, Epochs]:
    """A Spark offset as ``(positions, epochs)``; epochs are empty for offsets written before them."""
    positions = {str(k): int(v) for k, v in raw.items() if k != EPOCHS_KEY}  # type: ignore[call-overload]
    stamps = raw.get(EPOCHS_KEY)
    epochs = {str(k): str(v) for k, v in stamps.items()} if isinstance(stamps, dict) else {}
    return positions, epochs


def positions(raw: Mapping[str, object]) -> Offsets:
    """The per-stream positions of a Spark offset, without the epochs."""
    return split(raw)[0]


def join(positions: Mapping[str, int], epochs: Mapping[str, str]) -> dict[str, object]:
    """The offset Spark logs: positions in name order, and the epochs of the streams it names."""
    out: dict[str, object] = {}
    known = {s: epochs[s] for s in sorted(positions) if s in epochs}
    if known:
        out[EPOCHS_KEY] = known
    out.update({s: int(positions[s]) for s in sorted(positions)})
    return out


def recreated(
    positions: Mapping[str, int],
    was: Mapping[str, str],
    now: Mapping[str, str],
    tails: Mapping[str, int],
) -> list[str]:
    """Streams of ``positions`` that are not the stream those positions were read from."""
    out = []
    for stream, seq in sorted(positions.items()):
        other = stream in was and stream in now and was[stream] != now[stream]
        if other or (stream in tails and tails[stream] < seq):
            out.append(stream)
    return out


def refuse_or_warn(
    basin: str,
    stream: str,
    *,
    position: int,
    tail: int | None,
    was: str | None,
    now: str | None,
    fail: bool,
    restart_at: int | None = None,
) -> None:
    """Fail the query (``fail``) or log a WARNING: ``stream`` is not the stream its checkpointed
    ``position`` was read from."""
    what = (
        f"was created again (at {now}; the checkpoint read the stream created at {was})"
        if was is not None and now is not None and was != now
        else "holds fewer records than the checkpoint read (deleted and created again, or the server lost "
        "its data)"
    )
    if fail:
        raise ReadError(
            f"s2 source: stream {stream!r} in basin {basin!r} {what}: the checkpointed offset is seq_num "
            f"{position}, the stream's tail is {tail}. Reading on would skip or misplace its records. Set "
            f"{OPT_FAIL_ON_DATA_LOSS}=false to read the new stream from its first record on this checkpoint, "
            "or start the query on a new checkpointLocation"
        )
    log.warning(
        "s2 source: stream recreated: reading it from its first record stream=%s basin=%s "
        "checkpointed_seq_num=%d tail=%s restart_at=%s was_created=%s now_created=%s (%s=false)",
        stream,
        basin,
        position,
        tail,
        restart_at,
        was,
        now,
        OPT_FAIL_ON_DATA_LOSS,
    )
