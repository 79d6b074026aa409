"""Exactly-once configuration rules that need no running query: speculation refused, identity required
where the query id is unavailable, writer_id validated, and a check that cannot run refuses too. Spark is
stood in for by tiny objects exposing only what the checks read (``conf.get``, ``sparkContext``) and
raising the errors Spark raises; our own code runs for real."""

from __future__ import annotations

from typing import Any

import pytest
from py4j.protocol import Py4JNetworkError
from pyspark.errors import PySparkAttributeError
from pyspark.errors.exceptions.connect import SparkConnectGrpcException

from s2_sink._exactly_once.identity import (
    run_id_of_thread,
    session_facts,
    speculation_refused,
    writer_identity,
)
from s2_sink.errors import ConfigError
from s2_sink.writer import S2Writer
from tests.faults._support import cfg_for


class _Conf:
    def __init__(self, values: dict[str, str], error: Exception | None = None) -> None:
        self.values = values
        self.error = error

    def get(self, key: str, default: str | None = None) -> str | None:
        if self.error is not None:
            raise self.error
        return self.values.get(key, default)


class _ConnectLikeSession:
    """Like a Spark Connect session: a conf, but no SparkContext (the same error Spark Connect raises)."""

    def __init__(self, conf_error: Exception | None = None, **conf: str) -> None:
        self.conf = _Conf(conf, conf_error)

    @property
    def sparkContext(self) -> Any:
        raise PySparkAttributeError(
            errorClass="JVM_ATTRIBUTE_NOT_SUPPORTED", messageParameters={"attr_name": "sparkContext"}
        )


class _Context:
    def __init__(self, error: Exception) -> None:
        self.error = error

    def getLocalProperty(self, key: str) -> str | None:
        raise self.error


class _ClassicLikeSession:
    """Like a classic session whose JVM cannot be reached: reading a local property fails."""

    def __init__(self, error: Exception) -> None:
        self.sparkContext = _Context(error)
        self.conf = _Conf({})


def _identity(explicit: str | None, spark: Any) -> tuple[str, str | None]:
    """What `S2Writer` does with a session: read its facts, then choose the identity."""
    return writer_identity(explicit, session_facts(spark).query_id)


def test_speculation_is_refused_with_a_clear_error() -> None:
    """spark.speculation=true makes exactly-once refuse to write, naming the setting and the way out."""
    assert session_facts(_ConnectLikeSession(**{"spark.speculation": "true"})).speculation
    assert not session_facts(_ConnectLikeSession(**{"spark.speculation": "false"})).speculation
    assert not session_facts(_ConnectLikeSession()).speculation
    with pytest.raises(ConfigError, match=r"spark\.speculation=true.*at-least-once"):
        raise speculation_refused()


def test_identity_without_query_id_requires_writer_id() -> None:
    """Without a reachable streaming query id (Spark Connect), exactly-once asks for writer_id; an explicit
    writer_id is used as is."""
    with pytest.raises(ConfigError, match="writer_id"):
        _identity(None, _ConnectLikeSession())
    assert _identity("orders-to-s2", _ConnectLikeSession()) == ("orders-to-s2", None)


def test_writer_id_is_validated_when_the_writer_is_built() -> None:
    """A writer_id that cannot be part of a stream name is a ConfigError at construction, naming it."""
    cfg = cfg_for("http://127.0.0.1:1", "t-basin-config")
    with pytest.raises(ConfigError, match="writer_id"):
        S2Writer(cfg, writer_id="has spaces and ?")
    S2Writer(cfg, writer_id="orders-v2")
    S2Writer(cfg, delivery="at-least-once")


def test_speculation_that_cannot_be_read_is_refused() -> None:
    """If spark.speculation cannot be read, exactly-once refuses (it cannot tell speculation is off),
    naming the setting and the way out, with Spark's error chained."""
    lost = SparkConnectGrpcException("connection to the Spark Connect server lost")
    with pytest.raises(ConfigError, match=r"could not read spark\.speculation.*at-least-once") as info:
        session_facts(_ConnectLikeSession(conf_error=lost))
    assert info.value.__cause__ is lost


def test_query_id_that_cannot_be_read_is_refused() -> None:
    """If the streaming query id cannot be read (the JVM is unreachable), exactly-once refuses, naming
    writer_id, instead of carrying on without the identity check; with an explicit writer_id as well,
    since the ledger's query check rests on the same id."""
    gone = Py4JNetworkError("An error occurred while trying to connect to the Java server")
    with pytest.raises(ConfigError, match=r"could not read the streaming query id.*writer_id") as info:
        _identity(None, _ClassicLikeSession(gone))
    assert info.value.__cause__ is gone
    with pytest.raises(ConfigError, match="could not read the streaming query id"):
        _identity("orders-to-s2", _ClassicLikeSession(gone))


def test_unexpected_errors_in_the_checks_are_not_swallowed() -> None:
    """An error that is not Spark's (a bug, a wrong object) propagates from both checks as it is."""
    with pytest.raises(TypeError, match="not a session"):
        session_facts(_ConnectLikeSession(conf_error=TypeError("not a session")))
    with pytest.raises(TypeError, match="not a session"):
        _identity(None, _ClassicLikeSession(TypeError("not a session")))


def test_the_run_id_is_read_from_the_stream_execution_threads_name() -> None:
    """Spark names the thread that runs a query's micro-batches ``stream execution thread for [<name> ][id =
    <query id>, runId = <run id>]``; the run id is read from it for that query only (a user's job group or
    local properties do not enter), and a name that is not such a thread's gives none."""
    qid, rid = "7926ebd8-9183-4198-b71b-c3296d043e1d", "bb960e68-ded6-4675-8649-ea92c6f2a801"
    assert run_id_of_thread(f"stream execution thread for [id = {qid}, runId = {rid}]", qid) == rid
    named = f"stream execution thread for orders [to s2] [id = {qid}, runId = {rid}]"
    assert run_id_of_thread(named, qid) == rid
    assert run_id_of_thread(named, "another-query") is None
    assert run_id_of_thread("Thread-7", qid) is None
