"""`_env_hints.driver_only_vars` where it cannot tell: a Spark Connect session has no SparkContext."""

from __future__ import annotations

from typing import Any

import pytest
from pyspark.errors import PySparkAttributeError

from s2_sink._env_hints import driver_only_vars


class _ConnectLikeSession:
    """What pyspark's Spark Connect session answers for JVM attributes (its own error class)."""

    def __init__(self, error: Exception) -> None:
        self._error = error

    def __getattr__(self, name: str) -> Any:
        raise self._error


def test_a_session_without_a_spark_context_has_no_driver_only_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("S2_ACCESS_TOKEN", "set-on-the-driver")
    error = PySparkAttributeError(
        errorClass="JVM_ATTRIBUTE_NOT_SUPPORTED", messageParameters={"attr_name": "x"}
    )
    assert driver_only_vars(_ConnectLikeSession(error)) == []


def test_any_other_failure_is_not_swallowed() -> None:
    """Only the missing SparkContext means "cannot tell"; another error is a bug to see, not to hide."""
    with pytest.raises(RuntimeError, match="boom"):
        driver_only_vars(_ConnectLikeSession(RuntimeError("boom")))
