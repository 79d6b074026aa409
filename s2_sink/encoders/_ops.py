"""Change operations understood by the upsert encoder, mapped to the Flink S2 connector's ``@action`` codes
(the table: docs/encoding.md), and the texts of the bad rows they make.
"""

from __future__ import annotations

__all__ = ["DELETE", "DROP", "UPSERT", "null_key_column", "null_op", "unknown_op_prefix", "unknown_op_suffix"]

UPSERT = ("insert", "update_postimage", "+I", "+U", "u")
DELETE = ("delete", "-D", "d")
DROP = ("update_preimage", "-U")


def null_key_column(column: str) -> str:
    return f"upsert key column {column!r} is null"


def null_op(column: str) -> str:
    return f"op column {column!r} is null"


def unknown_op_prefix(column: str) -> str:
    """Start of the message for an op value no mapping knows (the value follows, quoted)."""
    return f"op column {column!r} has unknown value '"


def unknown_op_suffix() -> str:
    return "' (expected insert, update_postimage, update_preimage, delete, +I, +U, -U, -D, u or d)"
