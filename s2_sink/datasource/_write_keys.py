"""The option names of ``format("s2")`` writes, apart from their parsing (`_write_options`, which imports the
encoders and the routing): a read checks that it was given none of them (`_source.read_config`) in a
planning process that needs nothing else of the write side."""

from __future__ import annotations

from typing import Final

__all__ = ["OPT_PREFLIGHT", "WRITE_KEYS"]

OPT_FORMAT = "s2.format"
OPT_KEY_COLUMN = "s2.key-column"
OPT_VALUE_COLUMN = "s2.value-column"
OPT_KEY_COLUMNS = "s2.key-columns"
OPT_OP_COLUMN = "s2.op-column"
OPT_COMPACT = "s2.compact"
OPT_HEADERS_COLUMN = "s2.headers-column"
OPT_TIMESTAMP_COLUMN = "s2.timestamp-column"
OPT_EXCLUDE_COLUMNS = "s2.exclude-columns"
OPT_STREAM_COLUMN = "s2.stream-column"
OPT_ON_ERROR = "s2.on-error"
OPT_DLQ_STREAM = "s2.dlq-stream"
OPT_DELIVERY = "s2.delivery"
OPT_WRITER_ID = "s2.writer-id"
OPT_REPLAY_PARTITIONING = "s2.replay-partitioning"
OPT_ORDER_BY = "s2.order-by"
# `_transport.preflight.OPT_PREFLIGHT` spelled out: that module loads the S2 SDK.
OPT_PREFLIGHT = "s2.preflight"

# Every write option above; s2.order-by only to be refused with the reason (`_refuse_change_order`).
WRITE_KEYS: Final[frozenset[str]] = frozenset(
    value for name, value in list(globals().items()) if name.startswith("OPT_")
)
