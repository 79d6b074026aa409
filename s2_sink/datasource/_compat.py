"""What the installed pyspark's Python Data Source API offers ``format("s2")``, decided in one place:
detected, not inferred from the version (Databricks backports the API to 3.5-based runtimes).
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

import pyspark

from s2_sink.errors import S2SinkError

__all__ = ["HAS_DATASOURCE_API", "HAS_STREAM_ARROW_WRITER", "StreamArrowWriterBase", "require_datasource_api"]
__all__ += ["require_stream_arrow_writer"]

try:
    _DATASOURCE: ModuleType | None = importlib.import_module("pyspark.sql.datasource")
except ImportError:
    _DATASOURCE = None
HAS_DATASOURCE_API = _DATASOURCE is not None
HAS_STREAM_ARROW_WRITER = hasattr(_DATASOURCE, "DataSourceStreamArrowWriter")

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as StreamArrowWriterBase
elif HAS_STREAM_ARROW_WRITER:
    StreamArrowWriterBase = _DATASOURCE.DataSourceStreamArrowWriter
elif HAS_DATASOURCE_API:
    # pyspark 4.0: a base to define the class on; it is never instantiated (require_stream_arrow_writer).
    StreamArrowWriterBase = _DATASOURCE.DataSourceStreamWriter


def require_datasource_api() -> None:
    if not HAS_DATASOURCE_API:
        raise S2SinkError(
            f"format('s2') needs pyspark 4.0 or later (the Python Data Source API, pyspark.sql.datasource); "
            f"the installed pyspark is {pyspark.__version__}. On this pyspark write streams with "
            "df.writeStream.foreachBatch(S2Writer(...)) (exactly-once); reading S2 streams into Spark needs "
            "pyspark 4.0+ (Databricks Runtime 15.3+)"
        )


def require_stream_arrow_writer() -> None:
    require_datasource_api()
    if not HAS_STREAM_ARROW_WRITER:
        raise S2SinkError(
            "df.writeStream.format('s2') needs pyspark 4.1 or later (its Arrow streaming writer, "
            f"DataSourceStreamArrowWriter); the installed pyspark is {pyspark.__version__}. Write the stream "
            "with df.writeStream.foreachBatch(S2Writer(...)) (exactly-once on every supported pyspark) or "
            "upgrade pyspark; format('s2') reads and batch df.write.format('s2') work on this pyspark"
        )
