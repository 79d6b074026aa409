"""Read records (record columns, `s2_sink._wire.columns.RecordColumns`) turned into the rows of each
``s2.format``, as Arrow batches in the output schema's types: one module per format, which a task's
`s2_sink._read.ranges` picks by the read's `schemas.RowsKind` (decided on the driver).

- `schemas`: the output schemas, which user schemas each format can produce, and the rows kind (no Arrow
  kernels: the source's creation imports it).
- `raw_json`: raw rows, and json's: bodies decoded into a schema's columns (Arrow's reader where it
  provably agrees).
- `kafka_rows`, `upsert_rows`: the columns they take from headers; upsert's typed rows over the key and
  value JSON spliced, and its latest change per key.
- `by_record`: the record-by-record reference of the same conversions (tests hold the formats to it).
"""
