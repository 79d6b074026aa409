"""s2_sink: exactly-once Spark Structured Streaming into S2 streams, and back.

The public API is what ``__all__`` lists; every other module is private.
"""

from __future__ import annotations

from s2_sink._version import __version__
from s2_sink.errors import (
    CommitError,
    ConfigError,
    EncodeError,
    FencedError,
    S2SinkError,
    WriteError,
    WriterConflictError,
)

__all__ = [
    "CommitError",
    "ConfigError",
    "EncodeError",
    "FencedError",
    "S2SinkError",
    "WriteError",
    "WriterConflictError",
    "__version__",
]
