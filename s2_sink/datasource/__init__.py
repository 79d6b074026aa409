"""``format("s2")``: a Spark Python data source that reads S2 streams and writes DataFrames to them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from s2_sink._pyspark import needs_pyspark

if TYPE_CHECKING:
    from s2_sink.datasource._source import S2DataSource

__all__ = ["S2DataSource", "register"]


def register(spark: Any) -> None:
    """Register ``format("s2")`` with a SparkSession (classic or Spark Connect)."""
    source = __getattr__("S2DataSource")  # first: on pyspark 3.5 this says why not, before `spark.dataSource`
    from s2_sink._env_hints import passing_driver_only_vars  # noqa: PLC0415

    with passing_driver_only_vars(spark):  # S2_* set after the session started: the workers lack them
        spark.dataSource.register(source)


def __getattr__(name: str) -> Any:
    # Imported on first use: executors import this package to unpickle the writer and need none of the read
    # side. On pyspark 3.5 (no data source API) the package imports, and using it says why not.
    if name != "S2DataSource":
        raise AttributeError(f"module 's2_sink.datasource' has no attribute {name!r}")
    with needs_pyspark("format('s2')"):
        from s2_sink.datasource._compat import require_datasource_api  # noqa: PLC0415

    require_datasource_api()
    from s2_sink.datasource._source import S2DataSource  # noqa: PLC0415

    return S2DataSource
