"""Where rows become S2 records: columnar encoders (Arrow kernels in Python), their decoders, and S2's
metered size (docs/encoding.md). Names load on first use: the encoders need pyspark, the frame's constants
and the metered size (the ``s2-sink`` command, exactly-once bookkeeping) do not.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from s2_sink._pyspark import needs_pyspark

if TYPE_CHECKING:
    from s2_sink.encoders._base import Encoder, ErrorMode
    from s2_sink.encoders._decode import UpsertChange, decode_json, decode_upsert
    from s2_sink.encoders._frame import (
        BODY,
        ERROR,
        FRAME_COLUMNS,
        FRAME_DDL,
        HEADERS,
        KEY,
        MAX_RECORD_BYTES,
        TIMESTAMP,
        raise_for_errors,
    )
    from s2_sink.encoders._insert import InsertEncoder
    from s2_sink.encoders._kafka import KAFKA_KEY_HEADER, KafkaEncoder
    from s2_sink.encoders._metered import metered_bytes
    from s2_sink.encoders._upsert import ACTION_HEADER, KEY_HEADER, UpsertEncoder

__all__ = [
    "ACTION_HEADER",
    "BODY",
    "ERROR",
    "FRAME_COLUMNS",
    "FRAME_DDL",
    "HEADERS",
    "KAFKA_KEY_HEADER",
    "KEY",
    "KEY_HEADER",
    "MAX_RECORD_BYTES",
    "TIMESTAMP",
    "Encoder",
    "ErrorMode",
    "InsertEncoder",
    "KafkaEncoder",
    "UpsertChange",
    "UpsertEncoder",
    "decode_json",
    "decode_upsert",
    "metered_bytes",
    "raise_for_errors",
]

# Each module's public names.
_NAMES = {
    "_base": ("Encoder", "ErrorMode"),
    "_decode": ("UpsertChange", "decode_json", "decode_upsert"),
    "_frame": ("BODY", "ERROR", "FRAME_COLUMNS", "FRAME_DDL", "HEADERS", "KEY", "MAX_RECORD_BYTES"),
    "_insert": ("InsertEncoder",),
    "_kafka": ("KAFKA_KEY_HEADER", "KafkaEncoder"),
    "_metered": ("metered_bytes",),
    "_upsert": ("ACTION_HEADER", "KEY_HEADER", "UpsertEncoder"),
}
_HOME = {name: module for module, names in _NAMES.items() for name in names}
_HOME |= {"TIMESTAMP": "_frame", "raise_for_errors": "_frame"}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 's2_sink.encoders' has no attribute {name!r}")
    with needs_pyspark(f"s2_sink.encoders.{name}"):
        value = getattr(importlib.import_module(f"s2_sink.encoders.{home}"), name)
    globals()[name] = value  # once: later lookups do not come back here
    return value
