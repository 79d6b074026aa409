"""The s2.v1 append messages' field keys, and the small pieces both the record and header encoders join.

Field keys are ``(field number << 3) | wire type`` (0 = varint, 2 = length-delimited)::

    AppendInput  = { AppendRecord records = 1 (repeated); uint64 match_seq_num = 2 (optional);
                     string fencing_token = 3 (optional) }
    AppendRecord = { uint64 timestamp = 1 (optional); Header headers = 2 (repeated); bytes body = 3 }
    Header       = { bytes name = 1; bytes value = 2 }
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from s2_sink._wire.columns import large_binary
from s2_sink._wire.layout import Ints
from s2_sink.encoders._frame import BODY

__all__ = [
    "HEADER_NAME",
    "HEADER_VALUE",
    "INPUT_FENCING_TOKEN",
    "INPUT_MATCH_SEQ_NUM",
    "INPUT_RECORDS",
    "RECORD_BODY",
    "RECORD_HEADERS",
    "RECORD_TIMESTAMP",
    "check_length",
    "field",
    "join",
    "per_row",
    "varint",
]

INPUT_RECORDS: Final = 0x0A
INPUT_MATCH_SEQ_NUM: Final = 0x10
INPUT_FENCING_TOKEN: Final = 0x1A
RECORD_TIMESTAMP: Final = 0x08
RECORD_HEADERS: Final = 0x12
RECORD_BODY: Final = 0x1A
HEADER_NAME: Final = 0x0A
HEADER_VALUE: Final = 0x12


def join(*columns: pa.Array | pa.Scalar) -> pa.Array:
    """Row ``i`` of every column (a scalar: the same bytes in every row), concatenated (in C++)."""
    # the separator made here, not at import: pyarrow's first scalar conversion imports pandas
    return pc.binary_join_element_wise(*columns, pa.scalar(b"", pa.large_binary()))


def per_row(n: int, rows: Ints, values: Sequence[bytes]) -> pa.Array:
    """A large_binary column of ``n`` rows holding ``values[i]`` in row ``rows[i]`` and b"" elsewhere."""
    lengths = np.zeros(n, dtype=np.int64)
    if values:
        lengths[rows] = [len(v) for v in values]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return large_binary((offsets, np.frombuffer(b"".join(values), dtype=np.uint8)))


def check_length(column: pa.Array, rows: int, what: str) -> None:
    if len(column) != rows:
        raise ValueError(f"{what} has {len(column)} rows but {BODY} has {rows}")


def field(key: int, payload: bytes) -> bytes:
    """One length-delimited field, in plain Python (for a few values per chunk)."""
    return bytes([key]) + varint(len(payload)) + payload


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
