"""Protobuf wire helpers for the hot path.

Records are kept in their encoded form. An ``AppendRecord`` whose only field is ``body`` (``1a <len> <body>``)
becomes the headers-and-body part of a ``SequencedRecord`` by renumbering that one tag (``22 <len> <body>``);
prepending ``08 <seq> 10 <ts>`` completes it (`_read_form` does that for whole batches). A ``ReadBatch``'s
records field is a plain ``repeated bytes`` field, which a dynamic message (``RawList``) serialises and parses
in C (upb), so no per-record Python message objects are needed.
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
    "HeaderProbe",
    "PlainProbe",
    "RawList",
    "append_ack",
    "pb",
    "position",
    "read_batch",
    "stored_part",
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


def _plain_probe_class() -> Any:
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="s2_sink_lite_probe.proto", package="s2_sink_lite_probe", syntax="proto3"
    )
    rec = fdp.message_type.add(name="BodyOnly")
    rec.field.add(name="body", number=3, type=f.TYPE_BYTES, label=f.LABEL_OPTIONAL)
    inp = fdp.message_type.add(name="PlainProbe")
    inp.field.add(
        name="records",
        number=1,
        type=f.TYPE_MESSAGE,
        label=f.LABEL_REPEATED,
        type_name=".s2_sink_lite_probe.BodyOnly",
    )
    optionals = (("match_seq_num", 2, f.TYPE_UINT64), ("fencing_token", 3, f.TYPE_STRING))
    for idx, (name, number, ftype) in enumerate(optionals):
        inp.oneof_decl.add(name=f"_{name}")
        inp.field.add(
            name=name,
            number=number,
            type=ftype,
            label=f.LABEL_OPTIONAL,
            proto3_optional=True,
            oneof_index=idx,
        )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("s2_sink_lite_probe.PlainProbe"))


def _header_probe_class() -> Any:
    f = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(
        name="s2_sink_lite_header_probe.proto", package="s2_sink_lite_header_probe", syntax="proto3"
    )
    rec = fdp.message_type.add(name="NoBody")
    # Explicit presence, as in AppendRecord: a timestamp of 0 written out is still a timestamp.
    rec.oneof_decl.add(name="_timestamp")
    rec.field.add(
        name="timestamp",
        number=1,
        type=f.TYPE_UINT64,
        label=f.LABEL_OPTIONAL,
        proto3_optional=True,
        oneof_index=0,
    )
    rec.field.add(name="headers", number=2, type=f.TYPE_BYTES, label=f.LABEL_REPEATED)
    inp = fdp.message_type.add(name="HeaderProbe")
    inp.field.add(
        name="records",
        number=1,
        type=f.TYPE_MESSAGE,
        label=f.LABEL_REPEATED,
        type_name=".s2_sink_lite_header_probe.NoBody",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("s2_sink_lite_header_probe.HeaderProbe")
    )


#: ``AppendInput`` as if records had only a body: their timestamps and headers parse as unknown fields.
PlainProbe: Any = _plain_probe_class()

#: ``AppendInput`` as if records had no body (and the input no trailer): with unknown fields discarded, it
#: serializes a body-only record as ``0a 00`` and any other as its timestamp and headers (still encoded).
HeaderProbe: Any = _header_probe_class()

#: ``message RawList { repeated bytes items = 1; }``: the records field of AppendInput and of ReadBatch.
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


def stored_part(rec: Any) -> bytes:
    """The headers-and-body part of a ``SequencedRecord`` from a decoded ``AppendRecord`` without timestamp.

    Its own encoding (headers = 2, body = 3, in that order) with the top-level keys renumbered (to 3 and 4),
    which costs a tenth of building a ``SequencedRecord``; a record with fields of its own beyond those (kept
    as unknown fields, which a ``SequencedRecord`` built of its headers and body drops) is built that way.
    """
    buf = bytearray(rec.SerializeToString())
    pos = 0
    while pos < len(buf):
        key = buf[pos]
        if key not in _RENUMBER:
            out: bytes = pb.SequencedRecord(headers=rec.headers, body=rec.body).SerializeToString()
            return out
        buf[pos] = _RENUMBER[key]
        pos += 1
        length = shift = 0
        while True:  # a length varint (``SerializeToString`` writes them canonically)
            byte = buf[pos]
            pos += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
        pos += length
    return bytes(buf)


_RENUMBER = {0x12: 0x1A, 0x1A: 0x22}


def read_batch(records: bytes, tail: tuple[int, int] | None) -> bytes:
    """Encoded ``ReadBatch`` from its encoded records field (``0a <len> <SequencedRecord>`` each) and an
    optional tail position."""
    if tail is None:
        return records
    return b"".join((records, b"\x12", *_length_prefixed(position(*tail))))


def _length_prefixed(payload: bytes) -> tuple[bytes, bytes]:
    return varint(len(payload)), payload
