"""`h2_frames.Split` hands the frames of the unary requests' streams to them and every other byte, in order,
to h2, wherever the connection's reads cut the frames; a large frame of h2's is handed on as it comes."""

from __future__ import annotations

import itertools
import tracemalloc

import h2.config
import h2.connection
import h2.errors
import h2.events
import h2.settings
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from s2_sink._transport import h2_frames
from tests.unit.transport._odd_servers import h2_pair


class _Answer:
    """What one request's stream received: its frames' kinds, payloads, and whether the last ended it."""

    def __init__(self) -> None:
        self.frames: list[tuple[int, bytes]] = []

    def frame(self, kind: int, flags: int, payload: bytes) -> bool:
        self.frames.append((kind, bytes(payload)))
        return bool(flags & h2_frames.END_STREAM)


@pytest.mark.parametrize("cut", [1, 5, 9, 10, 4096, 1 << 20])
def test_frames_reach_their_reader_wherever_reads_cut_them(cut: int) -> None:
    """Streams of h2's and of unary requests, their answers interleaved (a 40,000-byte DATA frame of h2's
    among them), read in pieces of `cut` bytes: h2 gets its streams' answers whole, each request its
    frames."""
    client, server = h2_pair()
    split = h2_frames.Split(client)
    theirs, ours = [], []
    for i in range(4):
        sid = client.get_next_available_stream_id()
        if i % 2:
            client.send_headers(
                sid, [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "a")]
            )
            theirs.append(sid)
        else:
            block = b"\x82\x84\x86\x41\x01a"  # :method GET, :path /, :scheme http, :authority a
            sid = h2_frames.open_stream(client, block, end_stream=True)
            split.ours[sid] = _Answer()
            ours.append(sid)
        server.receive_data(client.data_to_send())
    client.update_settings({h2.settings.SettingCodes.MAX_FRAME_SIZE: 65536})  # as a read session does
    client.max_inbound_frame_size = 65536
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())  # the ACK
    for sid in theirs + ours:
        server.send_headers(sid, [(":status", "200")])
    for sid in ours + theirs:
        size = 40_000 if sid == theirs[0] else 10
        server.send_data(sid, bytes([sid]) * size, end_stream=True)
    stream = server.data_to_send()
    answers = {sid: split.ours[sid] for sid in ours}
    events = [e for at in range(0, len(stream), cut) for e in split(stream[at : at + cut])]
    data = {
        sid: b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived) and e.stream_id == sid)
        for sid in theirs
    }
    assert data == {sid: bytes([sid]) * (40_000 if sid == theirs[0] else 10) for sid in theirs}
    assert {e.stream_id for e in events if isinstance(e, h2.events.StreamEnded)} == set(theirs)
    for sid, answer in answers.items():
        assert [k for k, _ in answer.frames] == [h2_frames.HEADERS, h2_frames.DATA]
        assert answer.frames[1][1] == bytes([sid]) * 10
    assert not split.ours, "a request's stream was not ended"
    assert not split._held
    assert not split._rest


def test_reset_streams_are_read_for_as_many_as_h2_remembers_of_its_own() -> None:
    """A request's stream reset (`Split.cancel`: RST_STREAM with CANCEL) still takes the frames sent before
    the reset came: its header blocks go through the connection's HPACK decoder, and its end lets it go. As
    many are kept as h2 keeps of its own reset streams, the oldest let go first."""
    client, server = h2_pair()
    client.MAX_CLOSED_STREAMS = 2
    split = h2_frames.Split(client)
    sids = [h2_frames.open_stream(client, b"\x82\x84\x86\x41\x01a", end_stream=True) for _ in range(3)]
    server.receive_data(client.data_to_send())
    server.send_headers(sids[1], [(":status", "200"), ("x-a", "1")])  # x-a enters the HPACK table
    server.send_headers(sids[2], [(":status", "200"), ("x-a", "1")], end_stream=True)
    for sid in sids:
        split.ours[sid] = _Answer()
        split.cancel(sid)
    assert list(split.ours) == sids[1:]
    resets = server.receive_data(client.data_to_send())
    cancelled = [(sid, h2.errors.ErrorCodes.CANCEL) for sid in sids[:2]]  # the third closed by its answer
    assert [(e.stream_id, e.error_code) for e in resets] == cancelled
    assert split(server.data_to_send()) == []
    assert list(split.ours) == sids[1:2]
    assert (b"x-a", b"1") in client.decoder.header_table.dynamic_entries


_GET = [(":method", "GET"), (":path", "/"), (":scheme", "http"), (":authority", "a")]


def _our_frame(sid: int, payload: bytes) -> bytes:
    """A DATA frame ending stream `sid`, as a server sends an answer's body."""
    kind_flags = bytes((h2_frames.DATA, h2_frames.END_STREAM))
    return len(payload).to_bytes(3) + kind_flags + sid.to_bytes(4) + payload


def test_a_frame_of_ours_read_in_small_pieces_is_joined_once() -> None:
    """A large answer frame arriving in many small reads is held as it came and joined once, whole: no read
    copies what came before it (tracemalloc's peak over each read stays about the read's own size)."""
    client, _ = h2_pair()
    split = h2_frames.Split(client)
    sid = h2_frames.open_stream(client, b"\x82\x84\x86\x41\x01a", end_stream=True)
    answer = split.ours[sid] = _Answer()
    frame, piece = _our_frame(sid, bytes(1 << 20)), 4096
    tracemalloc.start()
    try:
        peaks = []
        for at in range(0, len(frame) - piece, piece):
            chunk = frame[at : at + piece]
            before = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            assert split(chunk) == []
            peaks.append(tracemalloc.get_traced_memory()[1] - before)
    finally:
        tracemalloc.stop()
    assert max(peaks) < 4 * piece, max(peaks)
    assert split(frame[at + piece :]) == []
    assert answer.frames == [(h2_frames.DATA, bytes(1 << 20))]


def _conversation() -> tuple[h2.connection.H2Connection, bytes, list[int]]:
    """A client with streams of h2's and of unary requests, and what the server answers all of them: headers,
    a large DATA frame of h2's, small ones, an answer split over two DATA frames."""
    client, server = h2_pair()
    client.update_settings({h2.settings.SettingCodes.MAX_FRAME_SIZE: 65536})
    client.max_inbound_frame_size = 65536
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    theirs, ours = [], []
    for i in range(4):
        if i % 2:
            sid = client.get_next_available_stream_id()
            client.send_headers(sid, _GET)
            theirs.append(sid)
        else:
            ours.append(h2_frames.open_stream(client, b"\x82\x84\x86\x41\x01a", end_stream=True))
    server.receive_data(client.data_to_send())
    for sid in theirs + ours:
        server.send_headers(sid, [(":status", "200"), ("x-n", str(sid))])
    for sid in ours + theirs:
        server.send_data(sid, bytes([sid]) * (50_000 if sid == theirs[0] else 30))
        server.send_data(sid, bytes([sid]) * 7, end_stream=True)
    return client, server.data_to_send(), ours


def _seen(events: list[object]) -> list[tuple[object, ...]]:
    fields = ("stream_id", "data", "headers")
    return [(type(e).__name__, *(getattr(e, a, None) for a in fields)) for e in events]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=1 << 17), max_size=30))
def test_any_cuts_of_the_reads_give_what_one_read_gives(cuts: list[int]) -> None:
    """However the connection's reads cut the bytes, h2 gets the same events and each request the same
    frames as from one read of all of them."""
    whole_client, stream, ours = _conversation()
    whole = h2_frames.Split(whole_client)
    whole.ours.update({sid: _Answer() for sid in ours})
    expected = {sid: whole.ours[sid] for sid in ours}
    expected_events = _seen(whole(stream))
    client, _, _ = _conversation()
    split = h2_frames.Split(client)
    split.ours.update({sid: _Answer() for sid in ours})
    answers = dict(split.ours)
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    events = [e for lo, hi in itertools.pairwise(bounds) for e in split(stream[lo:hi])]
    assert _seen(events) == expected_events
    assert {sid: a.frames for sid, a in answers.items()} == {sid: a.frames for sid, a in expected.items()}
    assert not split.ours
    assert not split._held


@pytest.mark.parametrize("half", [3, 9, 30])
def test_installed_while_h2_holds_part_of_a_frame_it_reads_from_that_frames_start(half: int) -> None:
    """`Split` put on a connection whose h2 has read part of a frame (a read session's large DATA frame):
    it takes that part from h2, so the frame's rest is not read as a frame's start: h2 gets the events a
    plain h2 gets, and a request opened after gets its answer."""
    plain, server = h2_pair()
    client, twin = h2_pair()
    for h2c, peer in ((plain, server), (client, twin)):
        sid = h2c.get_next_available_stream_id()
        h2c.send_headers(sid, _GET)
        peer.receive_data(h2c.data_to_send())
        peer.send_headers(sid, [(":status", "200")])
        peer.send_data(sid, b"r" * 1000)
    stream = server.data_to_send()
    assert twin.data_to_send() == stream
    expected = _seen(plain.receive_data(stream))
    cut = len(stream) - 1009 + half  # inside the DATA frame: its header's first bytes, or its payload's
    events = client.receive_data(stream[:cut])
    split = h2_frames.Split(client)
    assert not client.incoming_buffer._data
    events += split(stream[cut:])
    assert _seen(events) == expected
    ours = h2_frames.open_stream(client, b"\x82\x84\x86\x41\x01a", end_stream=True)
    answer = split.ours[ours] = _Answer()
    twin.receive_data(client.data_to_send())
    twin.send_headers(ours, [(":status", "200")])
    twin.send_data(ours, b"ok", end_stream=True)
    assert split(twin.data_to_send()) == []
    assert [k for k, _ in answer.frames] == [h2_frames.HEADERS, h2_frames.DATA]
    assert answer.frames[1][1] == b"ok"
