"""The ``s2-sink`` command: look at and repair what exactly-once delivery keeps in S2; run the lite server.
One module per subcommand (docs/operations.md); the protocol lives in the library.
"""

from __future__ import annotations

from s2_sink.cli._command import EXIT_CODES
from s2_sink.cli._main import main

__all__ = ["EXIT_CODES", "main"]
