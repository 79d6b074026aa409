"""``s2.max-bytes-per-trigger``: cap a micro-batch by metered bytes, next to the record cap.

Offsets are seq_nums and a tail lookup says nothing about sizes, so the planner measures: per stream with
new records it reads ahead from the frontier with the server's byte limit and ends the batch after the last
record that fits. The bytes of a planned batch are thus read twice (once here, once by the tasks); the
record cap costs nothing, so prefer it when record sizes are even.
"""

from __future__ import annotations

from collections.abc import Mapping

from s2_sink._read.planning import lookups as _lookups
from s2_sink._read.planning.offsets import Offsets
from s2_sink.config import S2Config

__all__ = ["cap_bytes"]


def cap_bytes(cfg: S2Config, frontier: Mapping[str, int], target: Mapping[str, int], limit: int) -> Offsets:
    """Move from ``frontier`` towards ``target`` by at most ``limit`` metered bytes in total.

    Streams with new records share the budget in name order, each taking at most an even share of what is
    left, so what one stream does not use rolls over to the next. A batch always moves: when not even one
    record fits, it takes the first stream's next record alone.
    """
    out = {s: frontier.get(s, 0) for s in {*frontier, *target}}
    pending = sorted(s for s, seq in target.items() if seq > out[s])
    budget = limit
    for index, stream in enumerate(pending):
        share = budget // (len(pending) - index)
        if share <= 0:
            break
        end, used = _lookups.measure_range(cfg, stream, out[stream], target[stream], share)
        out[stream] = end
        budget -= used
    if pending and all(out[s] == frontier.get(s, 0) for s in pending):
        out[pending[0]] += 1
    return out
