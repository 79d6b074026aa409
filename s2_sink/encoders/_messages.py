"""Error texts of bad rows, shared by the encoders so each names the column and value the same way."""

from __future__ import annotations

__all__ = [
    "empty_header_name",
    "negative_timestamp_prefix",
    "null_column",
    "null_key_column",
    "null_op",
    "oversize",
    "unknown_op_prefix",
    "unknown_op_suffix",
]


def oversize(size: int, key: str | None) -> str:
    """A record over 1 MiB metered, naming the key when there is one."""
    tail = f" (key {key[:200]})" if key is not None else ""
    return f"record of {size} metered bytes exceeds S2's 1 MiB (1048576 bytes) record limit{tail}"


def empty_header_name(column: str) -> str:
    """A header with a null or empty key: S2 reserves the empty name for command records."""
    return (
        f"headers column {column!r} has an entry with a null or empty key (S2 header names must be non-empty)"
    )


def negative_timestamp_prefix(column: str) -> str:
    """Start of the message for a timestamp before the epoch (the value follows)."""
    return f"timestamp column {column!r} is before 1970-01-01 (S2 timestamps are unsigned ms): "


def null_key_column(column: str) -> str:
    """An upsert key column that is null."""
    return f"upsert key column {column!r} is null"


def null_column(role: str, column: str) -> str:
    """A required column (e.g. the raw ``value``) that is null."""
    return f"{role} column {column!r} is null"


def null_op(column: str) -> str:
    """An op column that is null."""
    return f"op column {column!r} is null"


def unknown_op_prefix(column: str) -> str:
    """Start of the message for an op value no mapping knows (the value follows, quoted)."""
    return f"op column {column!r} has unknown value '"


def unknown_op_suffix() -> str:
    """End of the unknown-op message: what would have been accepted."""
    return "' (expected insert, update_postimage, update_preimage, delete, +I, +U, -U, -D, u or d)"
