"""Exactly-once delivery into S2: ledger, fencing, chunk tags, read-back and recovery.

The mechanism and why it is correct: docs/exactly-once.md; the modules: docs/architecture.md."""
