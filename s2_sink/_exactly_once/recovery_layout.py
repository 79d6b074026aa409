"""The recovery layout: which task writes a record when a micro-batch is replayed after a driver restart.

A replay subtracts from what it writes the multiset of fingerprints an earlier run already wrote, so all
records with one fingerprint must be written by one task: if two tasks hold a copy each, both subtract the
same earlier copy and one record is lost. The replay is therefore repartitioned by a function of exactly
what the fingerprint covers (`s2_sink._exactly_once.fingerprint`: target stream, headers, body; never the
routing key nor the timestamp), with an explicit partition count so adaptive execution cannot coalesce
partitions:

    partition = pmod(murmur3(layout hash, seed=42), n)
    layout hash = xxhash64(_s2_stream?, <@key value>)            if the first header is @key (upsert)
                  xxhash64(_s2_stream?, _s2_body, _s2_headers)   otherwise

An upsert change is placed by its stream and key alone (a part of its content), so every change of a key
is in one task and can be written in change order (`sort_changes`: by ``order_by``, then the record's
bytes); copies of one record still share a task. Tasks recompute the function in Python on the records
they hold and on the records they read back, so a task checks its own rows really are its own (else the
layout was changed underneath, and it refuses) and subtracts only fingerprints that belong to it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import mmh3
import xxhash
from pyspark.sql import functions as F

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink.encoders._change_order import sort_changes
from s2_sink.encoders._frame import ACTION, BODY, HEADERS, KEY
from s2_sink.encoders._frame import STREAM as STREAM_COLUMN
from s2_sink.encoders._upsert import KEY_HEADER

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

__all__ = ["RecoveryLayout", "layout_hash", "repartition_for_recovery", "spark_xxhash64"]

_SEED: Final = 42  # Spark's seed for both xxhash64 and the partitioner's murmur3


def _xxh64(data: bytes, seed: int) -> int:
    """XXH64 of `data` (unsigned `seed`, unsigned result): what Spark's ``XXH64.hashUnsafeBytes`` computes."""
    return xxhash.xxh64_intdigest(data, seed)


def spark_xxhash64(stream: str | None, headers: Iterable[tuple[bytes, bytes]], body: bytes | None) -> int:
    """Spark's ``xxhash64(_s2_stream, _s2_body, _s2_headers)`` of a row, as a signed 64-bit value
    (``stream=None`` leaves the stream column out, or stands for a null one, as does ``body=None``). Each
    value is hashed with the previous hash as seed; an empty headers array adds nothing, like a null one,
    so both agree with the fingerprint."""
    h = _SEED
    if stream is not None:  # surrogateescape: a poison target's bytes that are not UTF-8 (`stream_texts`)
        h = _xxh64(stream.encode("utf-8", "surrogateescape"), h)
    if body is not None:
        h = _xxh64(body, h)
    for name, value in headers:
        if name == TAG_HEADER:
            continue
        h = _xxh64(value, _xxh64(name, h))
    return h - (1 << 64) if h >> 63 else h


def layout_hash(stream: str | None, headers: Iterable[tuple[bytes, bytes]], body: bytes | None) -> int:
    """The hash a replay places a record by (see module docstring): an upsert change's stream and
    ``@key`` value, any other record's `spark_xxhash64`. The chunk tag is not content and is skipped."""
    content = [(name, value) for name, value in headers if name != TAG_HEADER]
    if content and content[0][0] == KEY_HEADER:
        return spark_xxhash64(stream, (), content[0][1])
    return spark_xxhash64(stream, content, body)


def _murmur3_long(value: int, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashLong`` (signed 32-bit result): the standard x86_32 hash of the value's
    eight little-endian bytes, which is how Spark mixes a long (low word, then high word, length 8)."""
    return mmh3.hash(value.to_bytes(8, "little", signed=True), seed, signed=True)


@dataclass(frozen=True, slots=True)
class RecoveryLayout:
    """How a replay was repartitioned: `partitions` hash partitions of `layout_hash`, the target stream
    included when rows are routed (`routed`)."""

    partitions: int
    routed: bool

    def partition_of(self, stream: str, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> int:
        """The task (partition id) that writes a record with this content in the replay."""
        return self.partition_of_hash(layout_hash(stream if self.routed else None, headers, body))

    def partition_of_hash(self, content: int) -> int:
        """The task (partition id) that holds a row whose `layout_hash` is `content`."""
        return _murmur3_long(content, _SEED) % self.partitions  # Python's % is Spark's pmod


def _layout_hash_expr(present: set[str]) -> Column:
    """`layout_hash` as a Spark expression over the record frame's columns."""
    stream = [F.col(STREAM_COLUMN)] if STREAM_COLUMN in present else []
    if ACTION in present:  # the changelog flat: every row is an upsert change, @key's value is _s2_key
        return F.xxhash64(*stream, F.col(KEY))
    whole = F.xxhash64(*stream, *(F.col(c) for c in (BODY, HEADERS) if c in present))
    if HEADERS not in present:  # the writer leaves it out when nothing has headers
        return whole
    first = F.get(F.col(HEADERS), 0)  # null for a null or empty array, whatever spark.sql.ansi.enabled says
    # null (no first header) is not true: the whole content, as in Python
    return F.when(first["name"] == F.lit(KEY_HEADER), F.xxhash64(*stream, first["value"])).otherwise(whole)


def repartition_for_recovery(frame: DataFrame, partitions: int) -> tuple[DataFrame, RecoveryLayout]:
    """The replay's record frame laid out by `layout_hash` in `partitions` tasks (the writer sizes it like
    any batch; tasks check their records against the layout's count, so any count is correct) with each
    task's changes in change order, and the `RecoveryLayout` its tasks check."""
    if partitions < 1:
        raise ValueError(f"a recovery layout needs at least one partition, got {partitions}")
    present = set(frame.columns)
    layout = RecoveryLayout(partitions, routed=STREAM_COLUMN in present)
    # An explicit count: adaptive execution does not coalesce it, so partition id == hash partition.
    laid_out = frame.repartition(layout.partitions, _layout_hash_expr(present))
    return sort_changes(laid_out), layout
