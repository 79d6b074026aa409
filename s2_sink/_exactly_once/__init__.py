"""Exactly-once delivery into S2: ledger, fencing, chunk tags, read-back and recovery.

See docs/exactly-once.md for the mechanism and the argument for why it is correct. The modules:

- `ledger`: the per-writer ledger stream (runs and committed micro-batches, conditional appends).
- `ledger_records`: its record format (state records, stream ends as deltas and snapshots, pieces).
- `fencing`: fencing tokens per run/generation and the conditional "fence if older" step.
- `tags`: the ``@s2sink`` chunk tag on the first record of every append.
- `fingerprint`: the content hash of a record that retries and replays subtract.
- `readback`: collect what a writer already wrote into a stream range.
- `sign_in_registers`: the register per partition task attempts sign in to (first attempt, retry or zombie).
- `task_hooks`: the executor-side pieces (tagger, token keeper, dedupe hook) shipped in the write plan.
- `epoch_plan`: those pieces for one micro-batch under one epoch, built in one place for both front doors.
- `identity`: the writer identity (``writer_id`` or the streaming query id) and the Spark settings refused.
- `coordinator`: the driver side of `S2Writer`, one `begin_batch`/`commit_batch` pair per micro-batch.
- `sink_run`: the ``format("s2")`` sink's epoch per micro-batch execution.

The fault suite's crash points live outside, in the neutral `s2_sink._crashpoints`: the write path and this
package both call them, and neither imports the other for it.
"""
