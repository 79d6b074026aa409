"""JSON bodies -> Arrow columns of a Spark schema, with the encoders' decoder (one JSON mapping both ways)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql.types import StructType

__all__ = ["decode_bodies"]


def decode_bodies(bodies: Sequence[bytes], schema: StructType, *, where: str) -> pa.RecordBatch:
    """Decode JSON object bodies into a batch with one column per field of ``schema``."""
    # Imported late: the decoder module is optional until a json read happens.
    from s2_sink.encoders import decode_json  # noqa: PLC0415

    return decode_json(bodies, schema)
