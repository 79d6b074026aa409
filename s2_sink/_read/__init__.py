"""Where reads happen, by stage: planning (driver), the S2 reads (tasks), rows (formats).

``s2_sink.datasource`` is the thin Spark adapter over this package: it parses options and hands Spark the
readers; everything it plans or reads goes through here. Stages import only the ones below them:

- `read_options`: the reader options, parsed and validated on the driver.
- `rows/`: record columns into the rows of each format (Arrow batches of the output schema).
- `session`: one stream's S2 reads: a range over an S2S read session, in runs of record columns.
- `partition`: the unit of work the planning makes, the ranges one task reads (plain data).
- `planning/`: which streams, which ranges, where each micro-batch ends (offsets, caps, read-committed
  ends, data loss and recreated streams, lag); its S2 lookups in `planning/lookups`.
- `ranges`: a task's read of its partition (`read_partition`): ranges several at once, gaps reported under
  the loss policy, session -> rows.
"""
