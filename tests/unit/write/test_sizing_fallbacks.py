"""Where Spark will not say how big a frame is or how many cores it has (`sizing.size_estimate`,
`sizing.cores`), the writer falls back to its defaults; a failure that is not Spark's is not hidden.

Spark is stood in for: a gateway that refuses a method (a locked-down cluster's py4j) and a Spark Connect
server that refuses to read a conf cannot be made with a local Spark.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from py4j.protocol import Py4JError
from pyspark.errors.exceptions.connect import SparkConnectGrpcException

from s2_sink._write.driver.sizing import cores, size_estimate


class _Context:
    """A SparkContext whose ``defaultParallelism`` raises `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    @property
    def defaultParallelism(self) -> int:
        raise self.error


def _conf(value: str | None = None, error: Exception | None = None) -> SimpleNamespace:
    def get(key: str, default: str | None) -> str | None:
        assert key == "spark.default.parallelism"
        if error is not None:
            raise error
        return value if value is not None else default

    return SimpleNamespace(get=get)


def _frame(sc: Any = None, conf: SimpleNamespace | None = None, jdf: Any = None) -> Any:
    session = SimpleNamespace(conf=conf or _conf())
    if sc is not None:
        session._sc = sc
    frame = SimpleNamespace(sparkSession=session)
    if jdf is not None:
        frame._jdf = jdf
    return frame


REFUSED = Py4JError("Method public int org.apache.spark.SparkContext.defaultParallelism() is not whitelisted")


def test_cores_from_the_setting_when_the_gateway_refuses_the_context() -> None:
    assert cores(_frame(sc=_Context(REFUSED), conf=_conf("6"))) == 6


def test_cores_default_to_8_when_a_connect_server_refuses_the_conf() -> None:
    refused = SparkConnectGrpcException(message="[CONFIG_NOT_AVAILABLE] spark.default.parallelism")
    assert cores(_frame(conf=_conf(error=refused))) == 8
    assert cores(_frame(sc=_Context(REFUSED), conf=_conf(error=Py4JError("gateway lost")))) == 8


def test_a_failure_that_is_not_sparks_is_not_taken_for_unknown_cores() -> None:
    with pytest.raises(TypeError, match="a bug"):
        cores(_frame(sc=_Context(TypeError("a bug")), conf=_conf("6")))
    with pytest.raises(KeyError):
        cores(_frame(conf=_conf(error=KeyError("a bug"))))


class _Plan:
    """A py4j handle on a query execution whose planning raises `error`."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def queryExecution(self) -> Any:
        raise self.error


def test_no_size_estimate_when_spark_cannot_plan_the_frame() -> None:
    assert size_estimate(_frame(jdf=_Plan(Py4JError("Method stats([]) does not exist")))) is None
    assert size_estimate(_frame()) is None  # Spark Connect: no JVM handle


def test_a_failure_that_is_not_sparks_is_not_taken_for_an_unknown_size() -> None:
    with pytest.raises(TypeError, match="a bug"):
        size_estimate(_frame(jdf=_Plan(TypeError("a bug"))))
