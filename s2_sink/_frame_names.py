"""Column names the write path's record frame and the read path's rows share, in a leaf module: creating the
read source must not load the encoders.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TIMESTAMP_COLUMN"]

TIMESTAMP_COLUMN: Final = "_s2_timestamp"
"""A record's timestamp: in the record frame, milliseconds (null: S2 assigns it); in the rows of a read's
``json``/``upsert`` schema, the record's timestamp as a Spark timestamp."""
