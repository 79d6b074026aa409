"""Driver-side planning of ``format("s2")`` reads: which streams, from which seq_num to which, in which
ranges; capped by the per-trigger limits and a writer's committed ends; checked for lost records and
recreated streams.

- `offsets`: the offset maps and their pure arithmetic (merges, caps, ranges, lag).
- `bounds`: the streams read and where each starts or ends (options -> seq_nums).
- `lookups`: the S2 calls planning makes (listings, tails, first records, timestamps, byte measures).
- `committed`: read-committed ends from a writer's ledger.
- `data_loss`: trimmed records and recreated streams under ``s2.fail-on-data-loss``.
- `micro_batches`: the streaming reader's planning state, from one offset to the next, and the byte cap
  (``s2.max-bytes-per-trigger``).
"""
