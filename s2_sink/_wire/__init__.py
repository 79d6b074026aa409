"""Where records become bytes on the wire: S2's protobuf messages written in bulk from Arrow columns.

- `append/`: the append side. `fields`: the append messages' field keys and the small pieces every encoder
  joins; `headers`: a record's ``headers`` fields in bulk (its own, and leading ones such as ``@key``);
  `proto`: serialized ``AppendInput`` messages, one per chunk of a record frame.
- `read_batch`: the read side, serialized ``ReadBatch`` messages -> record columns, in bulk (varints read
  at many positions at once).
- shared: `layout` (vectorised protobuf field layout over numpy), `columns` (Arrow arrays over numpy
  buffers and numpy views of them, Arrow kernels called without pandas, and the record columns of a read).

The append encoder's names are imported on first use: a read task's fresh Python worker imports this
package for `read_batch` and pays for nothing it does not run.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from s2_sink._wire.append.proto import (
        EncodedRecords,
        LeadingHeader,
        encode_append_inputs,
        encode_records,
        fencing_token_field,
        record_field,
    )

__all__ = [
    "EncodedRecords",
    "LeadingHeader",
    "encode_append_inputs",
    "encode_records",
    "fencing_token_field",
    "record_field",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("s2_sink._wire.append.proto"), name)
    raise AttributeError(f"module 's2_sink._wire' has no attribute {name!r}")
