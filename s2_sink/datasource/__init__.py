"""``format("s2")``: a Spark Python data source that reads S2 streams and writes DataFrames to them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from s2_sink.datasource._compat import HAS_DATASOURCE_API, require_datasource_api

# pyspark 3.5 has no data source API: the package still imports there, and using it says why not.
if HAS_DATASOURCE_API or TYPE_CHECKING:
    from s2_sink.datasource._source import S2DataSource

__all__ = ["S2DataSource", "register"]


def register(spark: Any) -> None:
    """Register ``format("s2")`` with a SparkSession (classic or Spark Connect)."""
    require_datasource_api()
    spark.dataSource.register(S2DataSource)


def __getattr__(name: str) -> Any:
    if name == "S2DataSource":
        require_datasource_api()  # raises: S2DataSource is a module attribute whenever the API exists
    raise AttributeError(f"module 's2_sink.datasource' has no attribute {name!r}")
