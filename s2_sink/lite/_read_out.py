"""How a read session is written out, behind one small interface: S2S frames (``content-type: s2s/proto``)
or server-sent events (``accept: text/event-stream``).

SSE events follow the API's ``ReadEvent`` (``api/src/v1/stream/sse.rs``): ``batch`` (a JSON ReadBatch, with
``id: <seq_num of its last record>,<records so far>,<metered bytes so far>``, which a client sends back as
``last-event-id`` to resume), ``ping`` (``{"timestamp": <ms>, "tail": <position>}``, the heartbeat),
``error`` (the ErrorInfo JSON as text; always last) and, when a session ends without error, ``data: [DONE]``.
"""

from __future__ import annotations

from typing import Protocol

import orjson

from s2_sink.lite._api_errors import ApiError
from s2_sink.lite._clock import now_ms
from s2_sink.lite._framing import encode_frame, encode_terminal, pick_compression
from s2_sink.lite._jsonfmt import read_batch_to_json
from s2_sink.lite._wire import read_batch

__all__ = ["ReadOut", "S2SOut", "SSEOut"]


class ReadOut(Protocol):
    """Encodes the messages of a read session."""

    #: Response headers of the session.
    headers: list[tuple[str, str]]

    def batch(self, records: bytes, tail: tuple[int, int] | None, progress: tuple[int, int, int]) -> bytes:
        """A ReadBatch records field (encoded SequencedRecords), the tail if caught up, and (next seq_num,
        count, bytes) so far."""

    def heartbeat(self, tail: tuple[int, int]) -> bytes:
        """A keep-alive while following the tail."""

    def error(self, exc: ApiError) -> bytes:
        """The last message of a session that fails after it started."""

    def done(self) -> bytes:
        """The last message of a session that ended without error (may be empty)."""


class S2SOut:
    """S2S frames of ReadBatch protobufs; a heartbeat is an empty batch with the tail; errors are terminal."""

    headers = [
        ("content-type", "s2s/proto"),
        ("cache-control", "no-cache, no-transform"),
        ("x-accel-buffering", "no"),
    ]

    def __init__(self, accept_encoding: str | None) -> None:
        self._compression = pick_compression(accept_encoding)

    def batch(self, records: bytes, tail: tuple[int, int] | None, progress: tuple[int, int, int]) -> bytes:
        """A frame with the batch."""
        return encode_frame(read_batch(records, tail), self._compression)

    def heartbeat(self, tail: tuple[int, int]) -> bytes:
        """A frame with an empty batch and the tail."""
        return encode_frame(read_batch(b"", tail), self._compression)

    def error(self, exc: ApiError) -> bytes:
        """A terminal frame."""
        return encode_terminal(exc)

    def done(self) -> bytes:
        """Nothing: the session just ends."""
        return b""


class SSEOut:
    """Server-sent events with JSON bodies in the request's ``s2-format``."""

    # No caching or buffering by proxies: events must reach the client as they are written.
    headers = [
        ("content-type", "text/event-stream"),
        ("cache-control", "no-cache, no-transform"),
        ("x-accel-buffering", "no"),
    ]

    def __init__(self, fmt: str) -> None:
        self._fmt = fmt

    def batch(self, records: bytes, tail: tuple[int, int] | None, progress: tuple[int, int, int]) -> bytes:
        """An ``event: batch``."""
        data = orjson.dumps(read_batch_to_json(read_batch(records, tail), self._fmt))
        seq, count, nbytes = progress
        return b"event: batch\ndata: " + data + f"\nid: {seq},{count},{nbytes}\n\n".encode()

    def heartbeat(self, tail: tuple[int, int]) -> bytes:
        """An ``event: ping`` with the time and the tail."""
        seq, ts = tail
        ping = {"timestamp": now_ms(), "tail": {"seq_num": seq, "timestamp": ts}}
        return b"event: ping\ndata: " + orjson.dumps(ping) + b"\n\n"

    def error(self, exc: ApiError) -> bytes:
        """An ``event: error``."""
        return b"event: error\ndata: " + exc.body() + b"\n\n"

    def done(self) -> bytes:
        """The ``[DONE]`` event."""
        return b"data: [DONE]\n\n"
