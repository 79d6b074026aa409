"""s2_sink: exactly-once Spark Structured Streaming into S2 streams, and back.

The public API is what ``__all__`` lists; every other module is private.
"""

from __future__ import annotations

import importlib
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

_LAZY = {
    "S2Writer": "writer",
    "S2DataSource": "datasource",
    "register": "datasource",
    **dict.fromkeys(("InsertEncoder", "KafkaEncoder", "UpsertChange", "UpsertEncoder"), "encoders"),
    **dict.fromkeys(("decode_json", "decode_upsert"), "encoders"),
}


def __getattr__(name: str) -> Any:
    # The writer, the data source and the encoders import pyspark (an extra, or a platform's own): load them
    # on first use, so `import s2_sink` stays light (lite server, CLI) and a missing pyspark is named as such.
    if name not in _LAZY:
        raise AttributeError(f"module 's2_sink' has no attribute {name!r}")
    with needs_pyspark(f"s2_sink.{name}"):
        return getattr(importlib.import_module(f"s2_sink.{_LAZY[name]}"), name)
