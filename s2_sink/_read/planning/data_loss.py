"""Records a read is due to read that are gone (trimmed, or the stream recreated), and what it does then.

Positions alone cannot tell a recreated stream from the old one, so the source's offsets carry each
stream's creation time under the key ``""``, which no stream can have; offsets written before that have
none. docs/format-s2.md, *Data loss*.
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
    """A Spark offset as ``(positions, epochs)``; offsets written before epochs have none."""
    positions = {str(k): int(v) for k, v in raw.items() if k != EPOCHS_KEY}  # type: ignore[call-overload]
    stamps = raw.get(EPOCHS_KEY)
    epochs = {str(k): str(v) for k, v in stamps.items()} if isinstance(stamps, dict) else {}
    return positions, epochs


def positions(raw: Mapping[str, object]) -> Offsets:
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
    """Fail the query (``fail``) or warn: ``stream`` is not the stream its checkpointed ``position`` was read
    from."""
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
