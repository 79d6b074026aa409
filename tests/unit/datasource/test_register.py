"""`s2_sink.register` on a pyspark without the Python Data Source API."""

from __future__ import annotations

import pytest


def test_register_on_a_pyspark_without_the_api_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """On pyspark 3.5 a SparkSession has no ``dataSource``: `register` must say what to use instead, not fail
    with an AttributeError (the compatibility run checks the same on a real pyspark 3.5)."""
    import s2_sink
    from s2_sink.datasource import _compat

    monkeypatch.setattr(_compat, "HAS_DATASOURCE_API", False)

    class Spark35Session:  # what pyspark 3.5's SparkSession lacks: a `dataSource` attribute
        pass

    with pytest.raises(s2_sink.S2SinkError, match=r"foreachBatch\(S2Writer"):
        s2_sink.register(Spark35Session())
