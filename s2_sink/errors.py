"""The errors s2_sink raises.

    S2SinkError                     root: catch this to catch everything s2_sink raises
    ├── ConfigError                 bad option, column or argument; raised on the driver before any task runs
    ├── PreflightError              the driver's check before the first batch: S2 unreachable, token refused,
    │                               basin or stream missing; names endpoint, basin, stream and the fix
    ├── EncodeError                 a row cannot become a record (null key, unknown op, record over 1 MiB)
    ├── ReadError                   format("s2") could not list, locate or read streams; names basin, stream
    ├── WriteError                  appends failed after retries; names stream, batch id and partition
    │   ├── FencedError             another writer holds the stream's fencing token
    │   ├── ReplayMismatchError     a format("s2") replay is partitioned differently from the run it repairs
    │   └── StreamResetError        a target stream ends before its committed end: deleted and recreated
    └── CommitError                 the exactly-once ledger could not be read or advanced
        └── WriterConflictError     a second writer with the same identity, or batch ids that went backwards

SDK errors are always chained (``raise ... from exc``), so ``status_code`` and ``code`` stay reachable.
"""

from __future__ import annotations

__all__ = [
    "CommitError",
    "ConfigError",
    "EncodeError",
    "FencedError",
    "PreflightError",
    "ReadError",
    "ReplayMismatchError",
    "S2SinkError",
    "StreamResetError",
    "WriteError",
    "WriterConflictError",
]


class S2SinkError(Exception):
    """Root of every error s2_sink raises."""


class ConfigError(S2SinkError, ValueError):
    """An option, column or argument is invalid. Raised on the driver, naming the option and the bad value."""


class PreflightError(S2SinkError):
    """The driver's check before the first batch's tasks launch failed (the message says why, and the fix)."""


class EncodeError(S2SinkError, ValueError):
    """A row cannot be turned into an S2 record."""


class ReadError(S2SinkError):
    """Reading S2 for ``format("s2")`` failed after retries, or a record does not fit the requested format."""


class WriteError(S2SinkError):
    """Appending to S2 failed after the configured retries."""


class FencedError(WriteError):
    """The stream is fenced by another writer, so this writer's appends are refused."""


class ReplayMismatchError(WriteError):
    """A replayed ``format("s2")`` micro-batch is partitioned unlike the run that partly wrote it."""


class StreamResetError(WriteError):
    """A target stream's tail is below the end the ledger committed for it (deleted and recreated): the
    writer cannot say where its records start there, so it stops before writing (fails closed)."""


class CommitError(S2SinkError):
    """The exactly-once ledger could not be read or advanced."""


class WriterConflictError(CommitError):
    """Two writers claim the same identity, or a writer's batch ids went backwards."""
