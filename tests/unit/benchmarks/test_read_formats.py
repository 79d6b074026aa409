"""The read-format timing compares like with like: both ways give the same batches for its data."""

from __future__ import annotations

from benchmarks.read_formats import (
    TYPED,
    TYPED_ARROW,
    _by_record,
    _columns,
    _from_columns,
    _materialize_by_record,
)
from s2_sink._read.rows.schemas import KAFKA_SCHEMA, UPSERT_SCHEMA
from s2_sink._read.rows.upsert_rows import materialized_batches, typed_batch


def test_both_ways_of_every_timed_case_give_the_same_batches() -> None:
    """For the timed kafka and upsert data (chunk tags, deletes, keys repeating across read batches), the
    column path and the record path give equal batches, so the timing measures the same work."""
    kafka = _columns(250, 100, "kafka")
    upsert = _columns(25_000, 5000, "upsert")  # keys come back after 10,000 records
    pairs = [
        (_from_columns("kafka", KAFKA_SCHEMA, kafka), _by_record("kafka", KAFKA_SCHEMA, kafka)),
        (_from_columns("upsert", UPSERT_SCHEMA, upsert), _by_record("upsert", UPSERT_SCHEMA, upsert)),
        (_from_columns("upsert", TYPED, upsert), _by_record("upsert", TYPED, upsert)),
        (materialized_batches(typed_batch, TYPED, "s", upsert, TYPED_ARROW), _materialize_by_record(upsert)),
    ]
    for columns, by_record in pairs:
        got, want = list(columns), list(by_record)
        assert len(got) == len(want)
        assert all(g.equals(w) for g, w in zip(got, want, strict=True))
        assert sum(b.num_rows for b in got) > 0
