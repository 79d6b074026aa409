"""Protobuf wire helpers for the hot path.

Records are kept in their encoded form. An ``AppendRecord`` whose only field is ``body`` (``1a <len> <body>``)
becomes the headers-and-body part of a ``SequencedRecord`` by renumbering that one tag (``22 <len> <body>``);
prepending ``08 <seq> 10 <ts>`` completes it. A ``ReadBatch``'s records field is then a plain ``repeated
bytes`` field, which a dynamic message (``RawList``) serialises and parses in C (upb), so no per-record Python
message objects are needed.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import (  # type: ignore[import-untyped]  # no stubs shipped; runtime is upb
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)
from s2_sdk._generated.s2.v1 import s2_pb2 as pb

__all__ = [
    "RawList",
    "append_ack",
    "pb",
    "position",
    "read_batch",
    "sequenced",
    "varint",
]


def _raw_list_class() -> Any:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="s2_sink_lite_raw.proto", package="s2_sink_lite", syntax="proto3"
    )
    msg = fdp.message_type.add(name="RawList")
    msg.field.add(
        name="items",
        number=1,
        type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
        label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("s2_sink_lite.RawList"))


# : ``message RawList { repeated bytes items = 1; }``: field 1 of AppendInput (records) and of ReadBatch
# (records).
RawList: Any = _raw_list_class()

_SMALL = [bytes((i,)) for i in range(128)]


def varint(n: int) -> bytes:
    """Base-128 varint of a non-negative integer."""
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def position(seq_num: int, timestamp: int) -> bytes:
    """Encoded ``StreamPosition``."""
    return b"\x08" + varint(seq_num) + b"\x10" + varint(timestamp)


def _field(tag: bytes, payload: bytes) -> bytes:
    return tag + varint(len(payload)) + payload


def append_ack(start: tuple[int, int], end: tuple[int, int], tail: tuple[int, int]) -> bytes:
    """Encoded ``AppendAck``."""
    return (
        _field(b"\x0a", position(*start)) + _field(b"\x12", position(*end)) + _field(b"\x1a", position(*tail))
    )


def sequenced(seq_num: int, timestamp: int, tail: bytes) -> bytes:
    """Encoded ``SequencedRecord`` from a stored headers-and-body part."""
    return b"\x08" + varint(seq_num) + b"\x10" + varint(timestamp) + tail


def read_batch(records: list[bytes], tail: tuple[int, int] | None) -> bytes:
    """Encoded ``ReadBatch`` from encoded ``SequencedRecord`` items and an optional tail position."""
    body: bytes = RawList(items=records).SerializeToString() if records else b""
    if tail is not None:
        body += _field(b"\x12", position(*tail))
    return body
