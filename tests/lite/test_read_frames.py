"""A read session's DATA frames honour what the client advertises: frames no larger than its
SETTINGS_MAX_FRAME_SIZE (the default 16 KiB, or up to 16 MiB if it says so) and never past its flow-control
windows, however slowly it grants more; every record arrives, in order, once."""

from __future__ import annotations

import asyncio

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest

from benchmarks.lite_ingest import append_frames
from benchmarks.lite_read import json_input
from s2_sink.lite import LiteServer
from s2_sink.lite._wire import RawList, pb
from s2_sink.testing import fresh_basin

RECORDS = 20_000


async def _read(endpoint: str, basin: str, *, max_frame: int, window: int, slow: bool) -> tuple[int, int]:
    """Read every record on one S2S session; returns (records, largest DATA frame). With `slow`, received
    data is acknowledged only after a pause, a frame at a time."""
    host, port = endpoint.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    conn.initiate_connection()
    sc = h2.settings.SettingCodes
    conn.update_settings({sc.INITIAL_WINDOW_SIZE: window, sc.MAX_FRAME_SIZE: max_frame})
    # h2 checks every frame of a chunk it is given against the frame size in force when the chunk came: a
    # DATA frame read together with the ACK of a larger size would be refused. So the read starts once the
    # server has acknowledged the settings.
    writer.write(conn.data_to_send())
    while conn.max_inbound_frame_size != max_frame:
        data = await asyncio.wait_for(reader.read(1 << 20), 30)
        assert data, "server closed the connection"
        conn.receive_data(data)
    sid = conn.get_next_available_stream_id()
    conn.send_headers(
        sid,
        [
            (":method", "GET"),
            (":path", f"/v1/streams/bench/records?seq_num=0&count={RECORDS}"),
            (":scheme", "http"),
            (":authority", f"{host}:{port}"),
            ("content-type", "s2s/proto"),
            ("s2-basin", basin),
        ],
        end_stream=True,
    )
    writer.write(conn.data_to_send())
    buf = bytearray()
    seqs: list[int] = []
    largest = 0
    ended = False
    while not ended:
        data = await asyncio.wait_for(reader.read(1 << 20), 30)
        assert data, "server closed the connection"
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.DataReceived) and ev.data:
                largest = max(largest, len(ev.data))
                if slow:
                    await asyncio.sleep(0.002)
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                buf += ev.data
                while len(buf) >= 4 and len(buf) >= 3 + int.from_bytes(buf[:3], "big"):
                    n = int.from_bytes(buf[:3], "big")
                    assert buf[3] == 0, bytes(buf[4 : 3 + n])[:200]
                    for item in RawList.FromString(bytes(buf[4 : 3 + n])).items:
                        seqs.append(pb.SequencedRecord.FromString(item).seq_num)
                    del buf[: 3 + n]
            elif isinstance(ev, h2.events.StreamEnded):
                ended = True
            elif isinstance(ev, h2.events.StreamReset):
                raise AssertionError("stream reset by server")
        writer.write(conn.data_to_send())
    writer.close()
    assert seqs == list(range(RECORDS))
    return len(seqs), largest


@pytest.mark.parametrize(
    ("max_frame", "window", "slow"),
    [
        (16_384, 65_535, False),  # the defaults: many small frames, the window refilled often
        (1 << 20, 8 << 20, False),  # large frames, as a client may advertise
        ((1 << 24) - 1, 300_000, False),  # frames capped by the window, not the frame size
        (16_384, 40_000, True),  # a slow reader: the server waits on every window update
    ],
)
def test_frames_honour_the_clients_settings(
    lite: LiteServer, max_frame: int, window: int, slow: bool
) -> None:
    basin = fresh_basin(lite.endpoint)
    asyncio.run(append_frames(lite.endpoint, basin, json_input(1000, "body"), RECORDS // 1000))
    got, largest = asyncio.run(_read(lite.endpoint, basin, max_frame=max_frame, window=window, slow=slow))
    assert got == RECORDS
    assert largest <= min(max_frame, window)
    if max_frame > 16_384 and window > 16_384:
        assert largest > 16_384  # the larger frame size is used
