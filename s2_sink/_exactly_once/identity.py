"""Who is writing: the exactly-once writer identity (``writer_id``, else the streaming query id; no
configuration: docs/exactly-once.md, *Writer identity*), and the Spark settings exactly-once refuses.
`session_facts` reads Spark into plain values, so the delivery mode runs without Spark (tests/sim)."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlparse

from s2_sink._pyspark import spark_errors
from s2_sink.errors import ConfigError

__all__ = [
    "QUERY_ID_PROPERTY",
    "SessionFacts",
    "query_id_from_checkpoint",
    "query_run_id",
    "run_id_of_thread",
    "session_facts",
    "speculation_refused",
    "validate_writer_id",
    "writer_identity",
]


_SPARK_ERRORS: Final = spark_errors()

QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"  # set by Spark on the driver thread and in the tasks
# The thread running a query's micro-batches (StreamExecution.prettyIdString): setJobGroup cannot forge it.
_THREAD_NAME_RE: Final = re.compile(r"^stream execution thread for .*\[id = ([^,\]]+), runId = ([^\]]+)\]$")
_WRITER_ID_RE: Final = re.compile(r"^[A-Za-z0-9._:/=+-]{1,200}$")


def validate_writer_id(writer_id: str) -> str:
    if not isinstance(writer_id, str) or not _WRITER_ID_RE.match(writer_id):
        raise ConfigError(
            f"writer_id must be 1-200 characters of letters, digits and . _ : / = + -, got {writer_id!r}"
        )
    return writer_id


def _spark_context(spark: Any) -> Any | None:
    """The session's SparkContext; None under Spark Connect (4.x raises the one error, 3.5 the other)."""
    try:
        return spark.sparkContext
    except (AttributeError, NotImplementedError):
        return None


def _query_id(spark: Any) -> str | None:
    """The calling thread's query id (None under Connect); unreadable, a ConfigError rather than a guess."""
    sc = _spark_context(spark)
    if sc is None:
        return None
    try:
        value = sc.getLocalProperty(QUERY_ID_PROPERTY)
    except _SPARK_ERRORS as exc:
        raise ConfigError(
            "delivery='exactly-once' could not read the streaming query id (Spark local property "
            f"{QUERY_ID_PROPERTY}): "
            f"{type(exc).__name__}: {exc}. Pass writer_id='<a name unique to this query, kept across "
            "restarts>' to S2Writer, or use delivery='at-least-once'"
        ) from exc
    return str(value) if value else None


def query_run_id(spark: Any, query_id: str | None) -> str | None:
    """The id of this start of query `query_id`, from the name of the thread calling ``foreachBatch``
    (classic Spark's stream execution thread); None where it cannot be read."""
    jvm = getattr(_spark_context(spark), "_jvm", None)
    if query_id is None or jvm is None:
        return None
    try:
        name = str(jvm.java.lang.Thread.currentThread().getName())
    except _SPARK_ERRORS:
        return None  # unreadable: the writer fails closed
    return run_id_of_thread(name, query_id)


def run_id_of_thread(name: str, query_id: str) -> str | None:
    match = _THREAD_NAME_RE.match(name)
    return match.group(2) if match is not None and match.group(1) == query_id else None


def writer_identity(explicit: str | None, query_id: str | None) -> tuple[str, str | None]:
    """``(writer_id, query_id)`` of an `S2Writer`: the explicit ``writer_id``, else the query id."""
    if explicit is not None:
        return validate_writer_id(explicit), query_id
    if query_id is None:
        raise ConfigError(
            "delivery='exactly-once' needs a stable writer identity: the streaming query id is not "
            "available here (Spark Connect, or the writer was called outside foreachBatch). Pass "
            "writer_id='<a name unique to this query, kept across restarts>' to S2Writer"
        )
    return query_id, query_id


def speculation_refused() -> ConfigError:
    return ConfigError(
        "delivery='exactly-once' does not support speculative execution (spark.speculation=true): "
        "a speculative copy of a task appends the same records concurrently with the original. Set "
        "spark.speculation=false for this query, or use delivery='at-least-once'"
    )


def _speculation_on(spark: Any) -> bool:
    """Whether speculative execution is on (unreadable: ConfigError)."""
    try:
        value = str(spark.conf.get("spark.speculation", "false")).strip().lower()
    except _SPARK_ERRORS as exc:
        raise ConfigError(
            "delivery='exactly-once' could not read spark.speculation to check that speculative execution "
            f"is off ({type(exc).__name__}: {exc}); a speculative copy of a task would append the same "
            "records concurrently with the original. Fix the session's connection to Spark, or use "
            "delivery='at-least-once'"
        ) from exc
    return value == "true"


@dataclass(frozen=True, slots=True)
class SessionFacts:
    """What exactly-once needs of the session that calls ``foreachBatch``, as plain values."""

    query_id: str | None  # None: not readable here (Spark Connect)
    run_id: str | None  # this start of the query (None: unreadable; the writer fails closed)
    connect: bool = False  # Spark Connect: one start of the query per Python process
    speculation: bool = False  # spark.speculation=true (refused)


def session_facts(spark: Any) -> SessionFacts:
    """`SessionFacts` of a SparkSession; with speculation on, nothing else (it is refused first)."""
    connect = _spark_context(spark) is None
    if _speculation_on(spark):
        return SessionFacts(None, None, connect, speculation=True)
    query_id = _query_id(spark)
    return SessionFacts(query_id, query_run_id(spark, query_id), connect)


def _local_dir(location: str) -> str | None:
    """The local directory of a checkpoint location; None on a remote file system."""
    url = urlparse(location)
    if url.scheme == "" or len(url.scheme) == 1:  # a plain path (or a Windows drive letter)
        return os.path.abspath(location)
    if url.scheme == "file":
        return url.path
    if url.scheme == "dbfs" and os.path.isdir("/dbfs"):  # Databricks mounts DBFS at /dbfs on the driver
        return "/dbfs" + url.path
    return None


def query_id_from_checkpoint(location: str) -> str | None:
    directory = _local_dir(location)
    if directory is None:
        return None
    try:
        with open(os.path.join(directory, "metadata"), encoding="utf-8") as fh:
            doc = json.loads(fh.readline())
    except (OSError, ValueError):
        return None
    value = doc.get("id") if isinstance(doc, dict) else None
    return str(value) if value else None
