"""Where records become bytes on the wire: S2's protobuf messages written in bulk from Arrow columns.

- `append/`: the append side. `fields`: the append messages' field keys, the small pieces every encoder
  joins and the vectorised field layout (varint sizes, key + varint fields packed row by row); `headers`:
  a record's ``headers`` fields in bulk (its own, and leading ones such as ``@key``); `proto`: serialized
  ``AppendInput`` messages, one per chunk of a record frame.
- `read_batch`: the read side, serialized ``ReadBatch`` messages -> record columns, in bulk (varints read
  at many positions at once).
- `columns`: Arrow arrays over numpy buffers and numpy views of them, Arrow kernels called without
  pandas, and the record columns of a read.
"""
