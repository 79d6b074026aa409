"""Who is writing: the exactly-once writer identity, and the Spark settings exactly-once refuses.

The identity defaults to the streaming query id (``sql.streaming.queryId`` local property, set by Spark
on the thread that runs ``foreachBatch``; stable across restarts because it comes from the checkpoint's
``metadata``), like Delta's ``txnAppId``. ``writer_id`` overrides it. Under Spark Connect the function
runs without a SparkContext; there the query id is looked up the same way when the server-side session
exposes it, and otherwise an explicit ``writer_id`` is required.
"""

from __future__ import annotations

import re
from typing import Any, Final

from s2_sink.errors import ConfigError

__all__ = ["check_no_speculation", "resolve_identity", "validate_writer_id"]

_QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
_WRITER_ID_RE: Final = re.compile(r"^[A-Za-z0-9._:/=+-]{1,200}$")


def validate_writer_id(writer_id: str) -> str:
    """Check an explicit writer_id (it becomes part of the ledger stream name)."""
    if not isinstance(writer_id, str) or not _WRITER_ID_RE.match(writer_id):
        raise ConfigError(
            f"writer_id must be 1-200 characters of letters, digits and . _ : / = + -, got {writer_id!r}"
        )
    return writer_id


def _query_id(spark: Any) -> str | None:
    try:
        sc = spark.sparkContext
    except Exception:  # Spark Connect: no SparkContext
        return None
    try:
        value = sc.getLocalProperty(_QUERY_ID_PROPERTY)
    except Exception:
        return None
    return str(value) if value else None


def resolve_identity(explicit: str | None, spark: Any) -> tuple[str, str | None]:
    """``(writer_id, query_id)``: the explicit id or the streaming query id; ConfigError if neither."""
    query_id = _query_id(spark)
    if explicit is not None:
        return validate_writer_id(explicit), query_id
    if query_id is None:
        raise ConfigError(
            "delivery='exactly-once' needs a stable writer identity: the streaming query id is not "
            "available here (Spark Connect, or the writer was called outside foreachBatch). Pass "
            "writer_id='<a name unique to this query, kept across restarts>' to S2Writer"
        )
    return query_id, query_id


def check_no_speculation(spark: Any) -> None:
    """Refuse speculative execution: two live attempts of one task would race on the same records."""
    try:
        value = str(spark.conf.get("spark.speculation", "false")).strip().lower()
    except Exception:
        return
    if value == "true":
        raise ConfigError(
            "delivery='exactly-once' does not support speculative execution (spark.speculation=true): "
            "a speculative copy of a task appends the same records concurrently with the original. Set "
            "spark.speculation=false for this query, or use delivery='at-least-once'"
        )
