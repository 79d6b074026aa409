"""``S2_*`` variables exported in the driver after the Spark session started: format("s2")'s Python workers
do not see them, and the error says so instead of asking to set what is set."""

from __future__ import annotations

import asyncio
import os

import pytest
from pyspark.sql import SparkSession
from s2_sdk import S2, AppendInput, Endpoints, Record

import s2_sink
from s2_sink.lite import LiteServer

pytestmark = pytest.mark.spark

VARS = ("S2_ACCESS_TOKEN", "S2_ACCOUNT_ENDPOINT", "S2_BASIN_ENDPOINT")


def _append(lite: LiteServer, basin: str, body: bytes) -> None:
    async def go() -> None:
        async with S2("test", endpoints=Endpoints(account=lite.endpoint, basin=lite.endpoint)) as s2:
            await s2.basin(basin).stream("events").append(AppendInput(records=[Record(body)]))

    asyncio.run(go())


def _read_error(spark: SparkSession, basin: str) -> str:
    with pytest.raises(Exception) as info:  # noqa: PT011 - Spark wraps the worker's ConfigError
        spark.read.format("s2").option("s2.basin", basin).option("s2.stream", "events").load().collect()
    return " ".join(str(info.value).split())


def test_variables_set_after_the_session_started_are_named_as_unseen(
    spark: SparkSession, lite: LiteServer, basin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lite server's exports pasted after the session started: `register` warns on the driver, and the
    read's error says the variables are set in the driver but not in the data source's worker, with the
    fix (set them before the session starts, or the options); it also says the endpoints fell back to the
    S2 cloud in the worker."""
    if any(spark._jvm.System.getenv(v) for v in VARS):
        pytest.skip("this test run started Spark with S2_* variables already exported")
    for var, value in zip(VARS, ("ignored", lite.endpoint, lite.endpoint), strict=True):
        monkeypatch.setenv(var, value)
    _append(lite, basin, b"one")
    s2_sink.register(spark)
    words = _read_error(spark, basin)
    assert "access_token (s2.auth-token) is required" in words
    assert "fell back to the default, the S2 cloud (https://a.s2.dev)" in words
    assert (
        "S2_ACCESS_TOKEN, S2_ACCOUNT_ENDPOINT, S2_BASIN_ENDPOINT are set in the driver process but not here"
    ) in words
    assert "set the variables before the Spark session starts" in words
    assert "s2.auth-token, s2.endpoints.account, s2.endpoints.basin" in words
    assert os.environ["S2_ACCESS_TOKEN"] == "ignored"  # and it is set in the driver, as the error says

    # The options are the fix that works without restarting the session.
    rows = (
        spark.read.format("s2")
        .option("s2.basin", basin)
        .option("s2.stream", "events")
        .option("s2.endpoints.account", lite.endpoint)
        .option("s2.endpoints.basin", lite.endpoint)
        .load()
        .collect()
    )
    assert [r.body for r in rows] == [b"one"]


def test_a_source_registered_directly_still_says_it_runs_in_a_worker(
    spark: SparkSession, lite: LiteServer, basin: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Registered with ``spark.dataSource.register`` (no comparison of the environments on the driver), the
    error still says the worker did not see the token and why a variable set in the driver is not seen."""
    if spark._jvm.System.getenv("S2_ACCESS_TOKEN"):
        pytest.skip("this test run started Spark with S2_ACCESS_TOKEN already exported")
    monkeypatch.setenv("S2_ACCESS_TOKEN", "ignored")
    spark.dataSource.register(s2_sink.S2DataSource)
    words = _read_error(spark, basin)
    assert "S2_ACCESS_TOKEN" in words
    assert "not set in this process" in words
    assert "is a Python worker Spark started with the environment of the session's start" in words
