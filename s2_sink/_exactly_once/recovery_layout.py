"""The recovery layout: which task writes a record when a batch is replayed after a driver restart.

All copies of a record must be in one task, so the replay is laid out by a hash of what the fingerprint
covers (an upsert change: its stream and key), shipped as a placement key Spark hashes into that partition."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import pyarrow as pa
import xxhash

from s2_sink._exactly_once.tags import TAG_HEADER
from s2_sink.encoders._changelog import KEY_HEADER
from s2_sink.encoders._frame import ACTION, BODY, HEADERS, KEY, stream_texts
from s2_sink.encoders._frame import STREAM as STREAM_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["RecoveryLayout", "content_hash", "layout_hash"]

_SEED: Final = 42


def content_hash(stream: str | None, headers: Iterable[tuple[bytes, bytes]], body: bytes | None) -> int:
    """Chained XXH64 over stream, body and headers (None left out), as a signed 64-bit value."""
    h = _SEED
    if stream is not None:  # surrogateescape: a poison target's bytes that are not UTF-8 (`stream_texts`)
        h = xxhash.xxh64_intdigest(stream.encode("utf-8", "surrogateescape"), h)
    if body is not None:
        h = xxhash.xxh64_intdigest(body, h)
    for name, value in headers:
        if name == TAG_HEADER:
            continue
        h = xxhash.xxh64_intdigest(value, xxhash.xxh64_intdigest(name, h))
    return h - (1 << 64) if h >> 63 else h


def layout_hash(stream: str | None, headers: Iterable[tuple[bytes, bytes]], body: bytes | None) -> int:
    """The hash a replay places a record by: an upsert change's stream and ``@key``, else its content."""
    content = [(name, value) for name, value in headers if name != TAG_HEADER]
    if content and content[0][0] == KEY_HEADER:
        return content_hash(stream, (), content[0][1])
    return content_hash(stream, content, body)


@dataclass(frozen=True, slots=True)
class RecoveryLayout:
    """`partitions` partitions of `layout_hash`; `keys[p]`, a long Spark's hashing puts in partition p."""

    partitions: int
    routed: bool
    keys: tuple[int, ...] = ()

    @classmethod
    def of(cls, spark: SparkSession, partitions: int, *, routed: bool) -> RecoveryLayout:
        if partitions < 1:
            raise ValueError(f"a recovery layout needs at least one partition, got {partitions}")
        return cls(partitions, routed, _placement_keys(spark, partitions))

    @classmethod
    def single(cls) -> RecoveryLayout:
        """A replay written by one task (the driver)."""
        return cls(1, routed=False, keys=(0,))

    def partition_of(self, stream: str, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> int:
        return self.partition_of_hash(layout_hash(stream if self.routed else None, headers, body))

    def partition_of_hash(self, content: int) -> int:
        return content % self.partitions  # a non-negative remainder, whatever the sign

    def placement(self, frame: pa.RecordBatch) -> pa.Array:
        names = frame.schema.names
        n = frame.num_rows
        # A routed target may be bytes that are not UTF-8 (Spark's cast lets them through): kept as
        # surrogateescape text, hashed back to the same bytes (a poison target, a bad row but placed too).
        streams = stream_texts(frame.column(STREAM_COLUMN)) if self.routed else [None] * n
        if ACTION in names:  # the changelog flat: every row is an upsert change, @key's value is _s2_key
            hashes = (
                content_hash(s, (), k) for s, k in zip(streams, frame.column(KEY).to_pylist(), strict=True)
            )
        else:
            bodies = frame.column(BODY).to_pylist()
            lists = frame.column(HEADERS).to_pylist() if HEADERS in names else [None] * n
            hashes = (
                layout_hash(s, [(h["name"], h["value"]) for h in hs or ()], b)
                for s, hs, b in zip(streams, lists, bodies, strict=True)
            )
        return pa.array([self.keys[self.partition_of_hash(h)] for h in hashes], pa.int64())


def _placement_keys(spark: SparkSession, partitions: int) -> tuple[int, ...]:
    """Per partition p, the smallest long ``repartition(partitions, col)`` puts in p, asked of Spark."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - only a replay's driver needs Spark here

    candidates = 32 * partitions
    while True:
        place = F.expr(f"pmod(hash(id), {partitions})")
        rows = (
            spark.range(0, candidates, numPartitions=1)
            .select(place.alias("p"), F.col("id"))
            .groupBy("p")
            .agg(F.min("id").alias("key"))
            .collect()
        )
        keys = {int(r["p"]): int(r["key"]) for r in rows}
        if len(keys) == partitions:
            return tuple(keys[p] for p in range(partitions))
        candidates *= 4  # not every partition was hit yet (improbable at 32 candidates per partition)
