"""The unit of work of the s2 source: seq_num ranges of one or more streams, planned on the driver and read by
one Spark task into Arrow batches of the output schema.

Small streams share a partition (`planning.offsets.pack_ranges`): a Spark task costs a Python worker's
floor, about what thousands of records cost, so a partition per small stream would make reading many of
them cost that floor per stream. The task reads its ranges several at a time (`session.read_ranges_columns`)
and hands Spark batches of several streams' rows.

`S2Partition` is planned in processes that need none of the reading (creating the source, planning a
read): the session, the rows and the loss policy are imported by `read_partition`, in the task.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from pyspark.sql.datasource import InputPartition

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

    from s2_sink._read.planning.data_loss import LossPolicy
    from s2_sink._read.read_options import ReadFormat
    from s2_sink._wire.read.record_columns import RecordColumns
    from s2_sink.config import S2Config

__all__ = ["S2Partition", "read_partition"]


class S2Partition(InputPartition):
    """Records of each ``(stream, first, stop)`` of ``ranges``: ``first <= seq_num < stop``. Plain data: it
    is pickled to the executor."""

    def __init__(self, ranges: Iterable[tuple[str, int, int]], *, materialize: bool = False) -> None:
        self.ranges = tuple(ranges)
        super().__init__(self.ranges)
        self.materialize = materialize

    def __repr__(self) -> str:
        shown = ", ".join(f"{s!r}[{lo}, {hi})" for s, lo, hi in self.ranges[:3])
        more = f", ... ({len(self.ranges)} ranges)" if len(self.ranges) > 3 else ""
        return f"S2Partition({shown}{more})"


def read_partition(
    cfg: S2Config,
    fmt: ReadFormat,
    schema: StructType,
    partition: S2Partition,
    *,
    on_loss: LossPolicy,
    target: pa.Schema | None = None,
) -> Iterator[pa.RecordBatch]:
    """Every data record of the ranges (command records such as fences and trims are skipped); records of
    a range that were trimmed or expired are handled by ``on_loss``.

    Records arrive as columns decoded in bulk from the wire and stay columns in every format; the rows of
    small ranges are handed to Spark together, in batches of about ``session.RUN_RECORDS`` rows. ``target``:
    ``schema``'s Arrow form, when the caller made it on the driver (else each batch makes it)."""
    from s2_sink._read.planning.data_loss import gap_handler  # noqa: PLC0415 - the task's (module doc)
    from s2_sink._read.rows.formats import materialized_batches, several_to_batch  # noqa: PLC0415
    from s2_sink._read.session import RUN_BYTES, RUN_RECORDS, read_range_columns, read_ranges_columns  # noqa: PLC0415

    def on_gap(stream: str, first: int, stop: int) -> None:  # the loss policy's code runs on a loss only
        gap_handler(cfg.basin, stream, on_loss)(first, stop)

    if partition.materialize:
        # The latest row per key needs each stream's records in order: one range after the other.
        for stream, first, stop in partition.ranges:
            gaps = functools.partial(on_gap, stream)
            yield from materialized_batches(
                fmt, schema, stream, read_range_columns(cfg, stream, first, stop, gaps), target=target
            )
        return
    pending: list[tuple[str, RecordColumns]] = []
    rows = size = 0
    runs = read_ranges_columns(cfg, partition.ranges, on_gap)
    for stream, columns in runs:  # runs of several read batches of one range (`session.RUN_RECORDS`)
        commands = columns.commands()
        data = columns.take(~commands) if commands.any() else columns
        if not len(data):
            continue
        pending.append((stream, data))
        rows, size = rows + len(data), size + data.bodies.nbytes
        if rows >= RUN_RECORDS or size >= RUN_BYTES:
            yield several_to_batch(fmt, schema, pending, target)
            pending, rows, size = [], 0, 0
    if pending:
        yield several_to_batch(fmt, schema, pending, target)
