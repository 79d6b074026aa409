"""The HTTP/2 frames of unary requests (`sdk._Unary`), written and read without h2: its state machine,
frame objects and events per frame were most of a small stream's unary append. h2 still gives each such
stream its id and keeps everything else on the connection (settings, send window, pings, GOAWAY, the
SDK's own streams); `Split` hands it every frame but those of the requests' streams, in order.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from h2.connection import H2Connection
    from hpack import Decoder

__all__ = ["CONTINUATION", "DATA", "END_HEADERS", "END_STREAM", "HEADERS", "RST_STREAM", "WINDOW_UPDATE"]
__all__ += ["Answers", "Cancelled", "Split", "open_stream", "queue"]

DATA, HEADERS, RST_STREAM, WINDOW_UPDATE, CONTINUATION = 0x0, 0x1, 0x3, 0x8, 0x9
END_STREAM, END_HEADERS, PADDED, PRIORITY = 0x1, 0x4, 0x8, 0x20
_MAX_BLOCKS: Final = 64  # answers' header blocks remembered


def queue(h2: H2Connection, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
    """Queue an HTTP/2 frame (RFC 9113, 4.1) with h2's own frames, in order."""
    h2._data_to_send += (len(payload).to_bytes(3) + bytes((kind, flags)) + stream_id.to_bytes(4)) + payload


def open_stream(h2: H2Connection, block: bytes, *, end_stream: bool) -> int:
    """Open a stream with the encoded header `block`, in a HEADERS frame and as many CONTINUATION frames as
    the peer's frame size asks (RFC 9113, 6.10); h2 gives its id and knows nothing more of it. A pending
    dynamic table size change starts the block (RFC 7541, 4.2): h2's encoder's."""
    stream_id = h2.highest_outbound_stream_id = h2.get_next_available_stream_id()
    block = (h2.encoder.encode([]) if h2.encoder.header_table.resized else b"") + block
    kind, flags, size = HEADERS, END_STREAM if end_stream else 0, h2.max_outbound_frame_size
    for at in range(0, len(block), size):
        last = END_HEADERS if at + size >= len(block) else 0
        queue(h2, kind, flags | last, stream_id, block[at : at + size])
        kind, flags = CONTINUATION, 0
    return stream_id


class Split:
    """A connection's ``receive_data``: the frames of the requests' streams (`ours`) go to them, stripped
    of padding and priority, until one ends its stream; the rest, in order, to h2, handed on as they come
    (a large frame of a read is not held here). The requests' DATA is given back to the connection's window
    at once (their streams' windows outlast their answers)."""

    def __init__(self, h2: H2Connection) -> None:
        self._h2, self._h2_receive = h2, h2.receive_data
        # The start of a frame not yet known to be h2's, or one of ours, in the pieces it came in, joined
        # once there are `_whole` bytes (its header, or all of it). It starts with what h2 holds of a frame
        # begun (a read session's), taken from h2: this reads from that frame's start, not its middle.
        pending = h2.incoming_buffer._data
        self._held, self._size, self._whole = [bytes(pending)] if pending else [], len(pending), 9
        del pending[:]
        self._rest = 0  # what is still to come of a frame of h2's begun
        self.ours: dict[int, Any] = {}  # `sdk._Unary` or `Cancelled` by stream id: ``frame`` takes each frame
        self._cancelled: deque[int] = deque()  # the streams given a `Cancelled`, oldest first

    def cancel(self, stream_id: int, block: bytes = b"", ends: int = 0) -> None:
        """Reset a request's stream (CANCEL) and read its frames still coming as `Cancelled`'s, for as many
        streams as h2 remembers of its own reset ones; the oldest's frames then go to h2."""
        queue(self._h2, RST_STREAM, 0, stream_id, (8).to_bytes(4))
        self.ours[stream_id] = Cancelled(self._h2.decoder, block, ends)
        self._cancelled.append(stream_id)
        if len(self._cancelled) > self._h2.MAX_CLOSED_STREAMS:
            oldest = self._cancelled.popleft()
            if isinstance(self.ours.get(oldest), Cancelled):
                del self.ours[oldest]

    def __call__(self, data: bytes) -> list[Any]:
        events: list[Any] = []
        if self._rest:
            rest, self._rest = self._rest, max(self._rest - len(data), 0)
            events += self._h2_receive(data[:rest])
            data = data[rest:]
        if self._held:
            self._held.append(data)
            self._size += len(data)
            if self._size < self._whole:
                return events
            data, self._held = b"".join(self._held), []
        at = start = consumed = 0
        whole = 9
        while len(data) - at >= 9:
            end = at + 9 + int.from_bytes(data[at : at + 3])
            stream_id = int.from_bytes(data[at + 5 : at + 9]) & 0x7FFFFFFF
            request = self.ours.get(stream_id) if stream_id else None
            if request is None:  # h2's: handed on with the frames around it, its rest as it comes
                self._rest, at = max(end - len(data), 0), min(end, len(data))
                continue
            if end > len(data):  # ours, not whole yet
                whole = end - at
                break
            if start < at:
                events += self._h2_receive(data[start:at])
            kind, flags, payload = data[at + 3], data[at + 4], data[at + 9 : end]
            consumed += len(payload) if kind == DATA else 0
            if flags & PADDED and kind in (DATA, HEADERS):
                payload = payload[1 : len(payload) - payload[0]]
            if flags & PRIORITY and kind == HEADERS:
                payload = payload[5:]
            if request.frame(kind, flags, payload):
                del self.ours[stream_id]
            start = at = end
        if start < at:
            events += self._h2_receive(data[start:at])
        held = data[at:]
        self._held, self._size, self._whole = [held] if held else [], len(held), whole
        if consumed:
            queue(self._h2, WINDOW_UPDATE, 0, 0, consumed.to_bytes(4))
        return events


class Cancelled:
    """A reset request's stream, its request let go: what the server sent before the reset still comes, and
    its header blocks go through the connection's HPACK decoder, whose table they may change."""

    __slots__ = ("_block", "_decoder", "_ends")

    def __init__(self, decoder: Any, block: bytes, ends: int) -> None:
        self._decoder, self._block, self._ends = decoder, block, ends  # a header block begun, its END_STREAM

    def frame(self, kind: int, flags: int, payload: bytes) -> bool:
        if kind in (HEADERS, CONTINUATION):
            self._block += payload
            self._ends = flags & END_STREAM if kind == HEADERS else self._ends
            if not flags & END_HEADERS:
                return False
            self._decoder.decode(self._block)
            self._block = b""
            return bool(self._ends)
        return kind == RST_STREAM or (kind == DATA and bool(flags & END_STREAM))


class Answers:
    """A connection's HPACK decoder remembering the fields of blocks of one-byte indexed fields only (RFC
    7541, 6.1; S2's answers to unary appends, a tenth of h2's CPU per answer to decode): such a block changes
    no table, so its fields hold until a block that may change the dynamic table, which forgets them all."""

    def __init__(self, decoder: Decoder) -> None:
        self.__dict__.update(_decoder=decoder, _known={})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._decoder, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._decoder, name, value)  # h2's settings of the decoder's limits

    def decode(self, data: bytes, raw: bool = False) -> list[Any]:
        known: dict[tuple[bytes, bool], list[Any]] = self._known
        fields = known.get((data, raw))
        if fields is None:
            fields = self._decoder.decode(data, raw=raw)
            if not (isinstance(data, bytes) and data and min(data) > 0x80 and 0xFF not in data):
                known.clear()  # the dynamic table may have changed
            elif len(known) < _MAX_BLOCKS:
                known[data, raw] = fields
        return list(fields)
