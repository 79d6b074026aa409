"""Protobuf wire helpers.

Records are kept in their encoded form: a ``ReadBatch``'s records field is a plain ``repeated bytes``
field, which a dynamic message (``RawList``) serialises and parses in C (upb), so no per-record Python
message objects are needed to cut it into records or join them.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import (  # type: ignore[import-untyped]  # no stubs shipped; runtime is upb
    descriptor_pb2,
    descriptor_pool,
    message_factory,
)
from s2_sdk._generated.s2.v1 import s2_pb2 as pb

__all__ = ["RawList", "append_ack", "pb", "position", "read_batch", "varint"]


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


#: ``message RawList { repeated bytes items = 1; }``: the records field of AppendInput and of ReadBatch.
RawList: Any = _raw_list_class()

_SMALL = [bytes((i,)) for i in range(128)]


def varint(n: int) -> bytes:
    """Base-128 varint of a non-negative integer."""
    if n < 0x80:
        return _SMALL[n]
    if n < 0x4000:  # two bytes (records' lengths and seq_nums are mostly of two or three)
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    if n < 0x200000:
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
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


def read_batch(records: bytes, tail: tuple[int, int] | None) -> bytes:
    """Encoded ``ReadBatch`` from its encoded records field (``0a <len> <SequencedRecord>`` each) and an
    optional tail position."""
    if tail is None:
        return records
    return b"".join((records, b"\x12", *_length_prefixed(position(*tail))))


def _length_prefixed(payload: bytes) -> tuple[bytes, bytes]:
    return varint(len(payload)), payload
