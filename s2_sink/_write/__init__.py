"""The write path both front doors share (`S2Writer` and ``format("s2")`` writes), in the order a row travels.

- `spec`: what a write does, validated once on the driver; `write_plan`: what the driver tells each task
  (the contract between the two sides).
- `driver/`: runs in the driver process: delivery modes, routing (which stream a row goes to), metrics.
- `task/`: runs inside a Spark task: rows become records (`frame_records`), appends are cut
  (`chunker`), appended (`appender`), bad rows set aside (`dead_letters`), totals reported back (`results`).

The bytes leave through `s2_sink._transport`; exactly-once lives in `s2_sink._exactly_once`.
"""
