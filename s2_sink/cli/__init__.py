"""The ``s2-sink`` command (docs/operations.md): the ledgers' commands, the streams' (fences and tail among
them), the table that declares both; the protocol lives in the library."""

from __future__ import annotations

from s2_sink.cli._command import EXIT_CODES
from s2_sink.cli._main import main

__all__ = ["EXIT_CODES", "main"]
