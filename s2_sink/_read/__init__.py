"""Where reads happen: S2 read sessions, the planning of ranges, and read records turned into Spark rows.

``s2_sink.datasource`` is the thin Spark adapter over this package: it parses options and hands Spark the
readers; everything it reads goes through here.

- `s2io`, `session`: S2 calls of the reader (listing, positions, range reads over an S2S read session).
- `planner`, `offsets`, `partition`, `committed`, `byte_cap`, `lag`: which ranges a batch reads, driver side.
- `task`: one read task's range, yielded as Arrow batches; `data_loss`: trimmed records on the way.
- `formats`, `schemas`, `json_body`, `json_bulk`, `json_splice`, `kafka_columns`, `upsert_columns`,
  `header_lookup`, `utf8_text`: record columns into the output schema's columns.
"""
