"""The ``s2-sink`` command: look at and repair what exactly-once delivery keeps in S2; run the lite server.

- ``s2-sink ledger list``: the exactly-once ledgers of a basin (`_ledger_cmd`, `_writers`).
- ``s2-sink ledger show WRITER_ID`` / ``ledger reset WRITER_ID --yes``: the writer's ledger (`_ledger_cmd`).
- ``s2-sink streams list`` / ``streams describe STREAM``: streams, their tails, fences and configs
  (`_streams_cmd`).
- ``s2-sink fences clear STREAM...``: remove fencing tokens (`_fences_cmd`).
- ``s2-sink tail STREAM``: print decoded insert or upsert records (`_tail_cmd`).
- ``s2-sink lite``: the lite server, as ``s2-sink-lite``.

The protocol lives in the library (`s2_sink._exactly_once`, `s2_sink.encoders`); these modules only parse
arguments, call it and put its answers and failures into words (`_failures`). Exit codes are in `EXIT_CODES`.
Times are ISO 8601 UTC in text and milliseconds since the epoch with ``--json`` (`_output`); a reader that
closes our output early (``| head``) ends the command quietly with exit 0.
"""

from __future__ import annotations

from s2_sink.cli._failures import EXIT_CODES
from s2_sink.cli._main import main

__all__ = ["EXIT_CODES", "main"]
