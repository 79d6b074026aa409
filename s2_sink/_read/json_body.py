"""JSON bodies -> Arrow columns of a Spark schema, with the encoders' decoder (one JSON mapping both ways)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import StructType

from s2_sink.encoders import decode_json
from s2_sink.errors import EncodeError, ReadError

__all__ = ["decode_bodies"]


def decode_bodies(bodies: Sequence[bytes], schema: StructType, *, where: str) -> pa.RecordBatch:
    """Decode JSON object bodies into a batch with one column per field of ``schema``."""
    try:
        return decode_json(bodies, schema)
    except EncodeError as exc:
        raise ReadError(f"s2 source: a record of {where} does not decode into the schema: {exc}") from exc
