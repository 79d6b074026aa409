"""s2_sink: exactly-once Spark Structured Streaming into S2 streams, and back.

The public API is what ``__all__`` lists; every other module is private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from s2_sink._logging import configure_from_env, configure_logging
from s2_sink._pyspark import needs_pyspark
from s2_sink._version import __version__
from s2_sink._write.driver.metrics import BatchMetrics, StreamMetrics
from s2_sink.config import S2Config
from s2_sink.errors import (
    CommitError,
    ConfigError,
    EncodeError,
    FencedError,
    PreflightError,
    ReadError,
    ReplayMismatchError,
    S2SinkError,
    WriteError,
    WriterConflictError,
)

if TYPE_CHECKING:
    from s2_sink.datasource import S2DataSource, register
    from s2_sink.encoders import (
        InsertEncoder,
        KafkaEncoder,
        UpsertChange,
        UpsertEncoder,
        decode_json,
        decode_upsert,
    )
    from s2_sink.writer import S2Writer

__all__ = [
    "BatchMetrics",
    "CommitError",
    "ConfigError",
    "EncodeError",
    "FencedError",
    "InsertEncoder",
    "KafkaEncoder",
    "PreflightError",
    "ReadError",
    "ReplayMismatchError",
    "S2Config",
    "S2DataSource",
    "S2SinkError",
    "S2Writer",
    "StreamMetrics",
    "UpsertChange",
    "UpsertEncoder",
    "WriteError",
    "WriterConflictError",
    "__version__",
    "configure_logging",
    "decode_json",
    "decode_upsert",
    "register",
]

# S2_SINK_LOG_FORMAT=json|text in the environment (e.g. spark.executorEnv.*) attaches a handler at import.
configure_from_env()

_ENCODERS = ("InsertEncoder", "KafkaEncoder", "UpsertChange", "UpsertEncoder", "decode_json", "decode_upsert")


def __getattr__(name: str) -> Any:
    # The writer, the data source and the encoders import pyspark (an extra, or a platform's own): load them
    # on first use, so `import s2_sink` stays light (lite server, CLI) and a missing pyspark is named as such.
    if name == "S2Writer":
        with needs_pyspark("s2_sink.S2Writer"):
            from s2_sink.writer import S2Writer  # noqa: PLC0415

        return S2Writer
    if name in ("S2DataSource", "register"):
        from s2_sink import datasource  # noqa: PLC0415 - format("s2") imports pyspark and pyarrow

        return getattr(datasource, name)
    if name in _ENCODERS:
        from s2_sink import encoders  # noqa: PLC0415 - encoders import pyspark and pyarrow

        return getattr(encoders, name)
    raise AttributeError(f"module 's2_sink' has no attribute {name!r}")
