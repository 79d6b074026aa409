"""``format("s2")``: a Spark Python data source that reads S2 streams and writes DataFrames to them."""

from __future__ import annotations

from typing import Any

from s2_sink.datasource._source import S2DataSource

__all__ = ["S2DataSource", "register"]


def register(spark: Any) -> None:
    """Register ``format("s2")`` with a SparkSession (classic or Spark Connect)."""
    spark.dataSource.register(S2DataSource)
