"""Exactly-once delivery into S2: ledger, fencing, chunk tags, read-back and recovery.

See docs/exactly-once.md for the mechanism and the argument for why it is correct. The modules:

- `_ledger`: the per-writer ledger stream (runs and committed micro-batches, conditional appends).
- `_fencing`: fencing tokens per run/generation and the conditional "fence if older" step.
- `_tags`: the ``@s2sink`` chunk tag on the first record of every append.
- `_fingerprint`: the content hash of a record that retries and replays subtract.
- `_readback`: collect what a writer already wrote into a stream range.
- `_task`: the executor-side pieces (tagger, token keeper, dedupe hook) shipped in the write plan.
- `_coordinator`: the driver side, one `begin_batch`/`commit_batch` pair per micro-batch.
- `_crashpoints`: named crash points for the fault-injection suite (inert without an env var).
"""
