"""Where rows become S2 records: columnar encoders (``encode_arrow``, Arrow kernels in Python), the matching
decoders, and S2's metered-size accounting. The type mapping is in docs/encoding.md.
"""

from __future__ import annotations

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
