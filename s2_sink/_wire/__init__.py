"""Where records become bytes on the wire: S2's protobuf messages written in bulk from Arrow columns.

- `_layout`: vectorised protobuf field layout over numpy (varint sizes, key + varint fields per row).
- `_arrow_views`: numpy views of Arrow binary arrays, and arrays over numpy buffers.
- `_append_proto`: serialized ``AppendInput`` messages, one per chunk of a record frame.
"""

from __future__ import annotations

from s2_sink._wire._append_proto import (
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
