"""Who is writing: the exactly-once writer identity, and the Spark settings exactly-once refuses.

An `S2Writer`'s identity covers what it writes to: by default ``<query id>.<destination hash>``, so several
writers in one ``foreachBatch`` (Spark's "write to multiple locations") each keep their own ledger. Ledgers
named by the bare query id (before identities covered the destination) are taken over by the first writer of
that query that finds its own ledger empty (`Coordinator`).

`session_facts` is the Spark adapter: it reads what exactly-once needs of the ``foreachBatch`` call's session
(speculation, query id, run id, Spark Connect) into a plain `SessionFacts`, so the delivery mode itself runs
without Spark (the simulation in tests/sim drives it with facts of its own).

The query id comes from (``sql.streaming.queryId`` local property, set by Spark
on the thread that runs ``foreachBatch``; stable across restarts because it comes from the checkpoint's
``metadata``), like Delta's ``txnAppId``. ``writer_id`` overrides it. Under Spark Connect the function
runs without a SparkContext; there the query id is looked up the same way when the server-side session
exposes it, and otherwise an explicit ``writer_id`` is required. The ``format("s2")`` sink's driver step
runs in a Python worker without Spark's properties: it reads the query id from the checkpoint's
``metadata`` file when the checkpoint is on a file system the driver's Python can open.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any, Final, NamedTuple
from urllib.parse import urlparse

from pyspark.errors import PySparkException

from s2_sink.errors import ConfigError

__all__ = [
    "QUERY_ID_PROPERTY",
    "RUN_ID_PROPERTY",
    "SessionFacts",
    "check_no_speculation",
    "query_id_from_checkpoint",
    "query_run_id",
    "resolve_identity",
    "session_facts",
    "speculation_refused",
    "validate_writer_id",
    "writer_identity",
]


def _spark_errors() -> tuple[type[Exception], ...]:
    """What a failed call into Spark raises: PySpark's errors (Spark Connect, captured JVM errors), and
    py4j's when classic PySpark cannot reach its JVM (a Connect-only install has no py4j)."""
    try:
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        return (PySparkException,)
    return (PySparkException, Py4JError)


_SPARK_ERRORS: Final = _spark_errors()

QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
"""The local property Spark sets to the streaming query id, on the driver thread and in the tasks."""
RUN_ID_PROPERTY: Final = "sql.streaming.runId"
"""Spark's name for the id of one start of the query (a new one at every ``start()``). pyspark 4.1 sets only
the query id as a local property, so this one is read where a runtime sets it and is None otherwise."""
_JOB_GROUP_PROPERTY: Final = "spark.jobGroup.id"
_UUID_RE: Final = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_WRITER_ID_RE: Final = re.compile(r"^[A-Za-z0-9._:/=+-]{1,200}$")


def validate_writer_id(writer_id: str) -> str:
    """Check an explicit writer_id (it becomes part of the ledger stream name)."""
    if not isinstance(writer_id, str) or not _WRITER_ID_RE.match(writer_id):
        raise ConfigError(
            f"writer_id must be 1-200 characters of letters, digits and . _ : / = + -, got {writer_id!r}"
        )
    return writer_id


def _local_property(spark: Any, name: str, what: str) -> str | None:
    """A streaming local property of the calling thread; None where Spark has no SparkContext (Connect).

    Any other failure to read it is a `ConfigError`: the identity, the check that the ledger belongs to
    this query and the detection of a restarted query rest on it, so exactly-once refuses rather than
    guessing.
    """
    try:
        sc = spark.sparkContext
    except (AttributeError, NotImplementedError):  # Spark Connect: 4.x raises the one, 3.5 the other
        return None
    try:
        value = sc.getLocalProperty(name)
    except _SPARK_ERRORS as exc:
        raise ConfigError(
            f"delivery='exactly-once' could not read {what} (Spark local property {name}): "
            f"{type(exc).__name__}: {exc}. Pass writer_id='<a name unique to this query, kept across "
            "restarts>' to S2Writer, or use delivery='at-least-once'"
        ) from exc
    return str(value) if value else None


def _query_id(spark: Any) -> str | None:
    return _local_property(spark, QUERY_ID_PROPERTY, "the streaming query id")


def query_run_id(spark: Any, query_id: str | None = None) -> str | None:
    """The id of this start of the streaming query (None under Spark Connect): it changes when the query
    is started again, in a new process or in the same one. Where the runtime does not set it as a local
    property (pyspark 4.1), classic Spark's stream execution has set it as the job group of the thread that
    runs the micro-batch (``spark.jobGroup.id``)."""
    run = _local_property(spark, RUN_ID_PROPERTY, "the streaming query's run id")
    if run is not None or query_id is None:
        return run
    group = _local_property(spark, _JOB_GROUP_PROPERTY, "the streaming query's job group")
    return group if group is not None and _UUID_RE.match(group) else None


class Identity(NamedTuple):
    """Who an `S2Writer` writes as: its writer id, the streaming query id (None if unknown), and the
    identity it may have to take over from (the bare query id, the name of default identities before they
    covered the destination)."""

    writer_id: str
    query_id: str | None
    predecessor: str | None


def writer_identity(explicit: str | None, query_id: str | None, destination: str) -> Identity:
    """The identity of an `S2Writer` writing to ``destination``: the explicit ``writer_id``, else the query
    id and a hash of the destination. ConfigError when neither can be had."""
    writer_id = _chosen_id(explicit, query_id)
    if explicit is not None:
        return Identity(writer_id, query_id, None)
    dest = hashlib.sha256(destination.encode()).hexdigest()[:8]
    return Identity(f"{query_id}.{dest}", query_id, query_id)


def resolve_identity(explicit: str | None, spark: Any) -> tuple[str, str | None]:
    """``(writer_id, query_id)``: the explicit id or the streaming query id; ConfigError if neither."""
    if explicit is not None:
        validate_writer_id(explicit)
    query_id = _query_id(spark)
    return _chosen_id(explicit, query_id), query_id


def _chosen_id(explicit: str | None, query_id: str | None) -> str:
    if explicit is not None:
        return validate_writer_id(explicit)
    if query_id is None:
        raise ConfigError(
            "delivery='exactly-once' needs a stable writer identity: the streaming query id is not "
            "available here (Spark Connect, or the writer was called outside foreachBatch). Pass "
            "writer_id='<a name unique to this query, kept across restarts>' to S2Writer"
        )
    return query_id


def check_no_speculation(spark: Any) -> None:
    """Refuse speculative execution: two live attempts of one task would race on the same records.

    A setting that cannot be read is refused too: exactly-once cannot tell that speculation is off.
    """
    if _speculation_on(spark):
        raise speculation_refused()


def speculation_refused() -> ConfigError:
    """The error for ``spark.speculation=true`` under exactly-once."""
    return ConfigError(
        "delivery='exactly-once' does not support speculative execution (spark.speculation=true): "
        "a speculative copy of a task appends the same records concurrently with the original. Set "
        "spark.speculation=false for this query, or use delivery='at-least-once'"
    )


def _speculation_on(spark: Any) -> bool:
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

    query_id: str | None
    """The streaming query id (None: not readable here, e.g. Spark Connect)."""
    run_id: str | None
    """The id of this start of the query (None where the runtime does not expose it)."""
    connect: bool = False
    """A Spark Connect session: one start of the query per Python process."""
    speculation: bool = False
    """``spark.speculation=true`` (exactly-once refuses it)."""


def session_facts(spark: Any) -> SessionFacts:
    """Read `SessionFacts` off a SparkSession (ConfigError where a fact cannot be read). With speculation on,
    nothing else is read: the write is refused for that first."""
    connect = _is_connect(spark)
    if _speculation_on(spark):
        return SessionFacts(None, None, connect, speculation=True)
    query_id = _query_id(spark)
    return SessionFacts(query_id, query_run_id(spark, query_id), connect)


def _is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session (it has no SparkContext)."""
    try:
        spark.sparkContext  # noqa: B018 - the property raises under Spark Connect
    except (AttributeError, NotImplementedError):  # 4.x raises the one, 3.5 the other
        return True
    return False


def _local_dir(location: str) -> str | None:
    """The local directory of a checkpoint location, or None for a remote file system (s3://, abfss://...)."""
    url = urlparse(location)
    if url.scheme == "" or len(url.scheme) == 1:  # a plain path (or a Windows drive letter)
        return os.path.abspath(location)
    if url.scheme == "file":
        return url.path
    if url.scheme == "dbfs" and os.path.isdir("/dbfs"):  # Databricks mounts DBFS at /dbfs on the driver
        return "/dbfs" + url.path
    return None


def query_id_from_checkpoint(location: str) -> str | None:
    """The streaming query id stored in ``<location>/metadata``, if the driver's Python can read it."""
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
