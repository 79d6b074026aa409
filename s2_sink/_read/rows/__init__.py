"""Read records (record columns, `s2_sink._wire.columns.RecordColumns`) turned into the rows of each
``s2.format``, as Arrow batches in the output schema's types.

- `schemas`: the output schemas and which user schemas each format can produce (no Arrow kernels: the
  source's creation imports it).
- `formats`: one batch per run of records, per format; JSON bodies decoded into a schema's columns (Arrow's
  reader where it provably agrees).
- `by_record`: the record-by-record reference of the same conversions (tests hold the formats to it).
- `header_columns`: the columns kafka and upsert take from headers; `json_splice`: key + value JSON.
"""
