"""The s2 source's record columns -> Arrow batch per read format: from columns against record by record.

    python -m benchmarks.read_formats [--records 200000] [--batch 1000]

``ReadBatch`` messages of ``--batch`` records (~100-byte JSON bodies of five columns) are decoded into
record columns beforehand (the wire decoding is the same for every format and not measured here). Each
format then turns the columns into the batches Spark receives, two ways in one process: from the columns
(``columns_to_batch`` / ``materialized_batches``, what reads do) and through the SDK's record objects
(``to_records`` then ``records_to_batch`` / ``materialize``, what reads of kafka and upsert did before).

- ``kafka``: an ``@kafka-key`` header, a user header and an exactly-once chunk tag on every record.
- ``upsert``: ``@key`` / ``@action`` headers (every tenth change a delete), as text; ``upsert typed``: the
  same decoded into the table's five columns and ``_s2_action``; ``upsert materialize``: the latest change
  of 10,000 keys, typed.
- ``raw`` and ``json`` (already from columns before): for scale.

Reported: the best of five passes, in microseconds of this process's CPU per record; the last line is one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.types import BooleanType, DoubleType, LongType, StringType, StructField, StructType
from s2_sdk import SequencedRecord
from s2_sdk._generated.s2.v1 import s2_pb2 as pb

from s2_sink._read.read_options import ReadFormat
from s2_sink._read.rows.schemas import KAFKA_SCHEMA, RAW_SCHEMA, UPSERT_SCHEMA, rows_kind
from s2_sink._read.rows.upsert_rows import materialized_batches, typed_batch
from s2_sink._wire.columns import RecordColumns
from s2_sink._wire.read_batch import parse_read_batch
from s2_sink.datasource._readers import columns_to_batch
from s2_sink.encoders._arrow_types import to_arrow_schema
from tests.rows_by_record import materialize, records_to_batch, to_records

__all__ = ["main"]

TABLE = StructType(
    [
        StructField("id", LongType()),
        StructField("name", StringType()),
        StructField("score", DoubleType()),
        StructField("active", BooleanType()),
        StructField("city", StringType()),
    ]
)
TYPED = StructType(
    [*TABLE.fields, StructField("_s2_action", StringType()), StructField("_s2_seq_num", LongType())]
)
KEYS = 10_000
TYPED_ARROW = to_arrow_schema(TYPED)


def _message(first: int, count: int, layout: str) -> bytes:
    batch = pb.ReadBatch()
    for seq in range(first, first + count):
        key = seq % KEYS
        body = (
            f'{{"name":"user-{seq:08d}","score":{seq * 0.25},"active":{str(seq % 2 == 0).lower()},'
            f'"city":"city-{seq % 97:03d}-{"x" * 20}"}}'
        ).encode()
        record = batch.records.add(seq_num=seq, timestamp=1_700_000_000_000 + seq)
        if layout == "kafka":
            record.body = body
            for name, value in (
                (b"@kafka-key", str(key).encode()),
                (b"trace", f"t-{seq}".encode()),
                (b"@s2sink", b"5f3a9c2e 3 1042 7 0"),
            ):
                record.headers.add(name=name, value=value)
        else:
            delete = seq % 10 == 9
            record.body = b"" if delete else body
            for name, value in (
                (b"@key", f'{{"id":{key}}}'.encode()),
                (b"@action", b"d" if delete else b"u"),
            ):
                record.headers.add(name=name, value=value)
    return batch.SerializeToString()


def _columns(records: int, batch: int, layout: str) -> list[RecordColumns]:
    return [
        parse_read_batch(_message(first, min(batch, records - first), layout))[0]
        for first in range(0, records, batch)
    ]


def _by_record(fmt: ReadFormat, schema: StructType, parts: list[RecordColumns]) -> Iterator[pa.RecordBatch]:
    for columns in parts:
        yield records_to_batch(fmt, schema, "s", to_records(columns))


def _from_columns(
    fmt: ReadFormat, schema: StructType, parts: list[RecordColumns]
) -> Iterator[pa.RecordBatch]:
    for columns in parts:
        yield columns_to_batch(rows_kind(fmt, schema), schema, [("s", columns)])


def _materialize_by_record(parts: list[RecordColumns]) -> Iterator[pa.RecordBatch]:
    records: list[SequencedRecord] = [r for p in parts for r in to_records(p) if not r.is_command_record()]
    latest = materialize("s", records)
    for i in range(0, len(latest), 1000):
        yield records_to_batch("upsert", TYPED, "s", latest[i : i + 1000])


def _best(batches: Callable[[], Iterator[pa.RecordBatch]], records: int) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for _ in range(5):
        start = time.process_time()
        rows = sum(b.num_rows for b in batches())
        best = min(best, time.process_time() - start)
    return round(best / records * 1e6, 3), rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args(argv)
    n = args.records
    kafka = _columns(n, args.batch, "kafka")
    upsert = _columns(n, args.batch, "upsert")
    json_schema = StructType([*TABLE.fields])
    cases: dict[
        str, tuple[Callable[[], Iterator[pa.RecordBatch]], Callable[[], Iterator[pa.RecordBatch]] | None]
    ] = {
        "raw": (lambda: _from_columns("raw", RAW_SCHEMA, kafka), None),
        "json": (lambda: _from_columns("json", json_schema, kafka), None),
        "kafka": (
            lambda: _from_columns("kafka", KAFKA_SCHEMA, kafka),
            lambda: _by_record("kafka", KAFKA_SCHEMA, kafka),
        ),
        "upsert": (
            lambda: _from_columns("upsert", UPSERT_SCHEMA, upsert),
            lambda: _by_record("upsert", UPSERT_SCHEMA, upsert),
        ),
        "upsert typed": (
            lambda: _from_columns("upsert", TYPED, upsert),
            lambda: _by_record("upsert", TYPED, upsert),
        ),
        "upsert materialize": (
            lambda: materialized_batches(typed_batch, TYPED, "s", upsert, TYPED_ARROW),
            lambda: _materialize_by_record(upsert),
        ),
    }
    out: dict[str, Any] = {"records": n, "batch": args.batch}
    for name, (columns, by_record) in cases.items():
        us, rows = _best(columns, n)
        row: dict[str, Any] = {"rows": rows, "from_columns_us": us}
        if by_record is not None:
            row["by_record_us"], by_record_rows = _best(by_record, n)
            assert by_record_rows == rows, (name, rows, by_record_rows)
            row["speedup"] = round(row["by_record_us"] / us, 1)
        out[name] = row
        print(f"{name:>20}: {row}")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
