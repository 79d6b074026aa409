"""What a read does when records it is due to read were trimmed or expired before it got to them.

S2 drops records by retention age and by trim commands; a position saved in a streaming checkpoint can then
point below the first record still stored. Like Kafka's ``failOnDataLoss``, a streaming read fails by
default (``s2.fail-on-data-loss=true``) so the loss cannot go unnoticed, or skips to the trim point and logs
a WARNING.
A batch read reads whatever is retained between its bounds, so it ignores gaps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from s2_sink._read.read_options import OPT_FAIL_ON_DATA_LOSS
from s2_sink.errors import ReadError

__all__ = ["GapHandler", "LossPolicy", "gap_handler"]

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
