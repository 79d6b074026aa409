"""Where records become bytes on the wire: S2's protobuf messages written in bulk from Arrow columns.

- `_layout`: vectorised byte-layout primitives (varint sizes and writes, run copies) over numpy.
- `_arrow_views`: numpy views of the Arrow buffers the encoder reads (offsets, data, validity).
- `_append_proto`: serialized ``AppendInput`` messages, one per chunk of a record frame.
"""

from __future__ import annotations

from s2_sink._wire._append_proto import encode_append_inputs

__all__ = ["encode_append_inputs"]
