"""A unary append's header block, encoded once per transport but for ``:path`` and ``content-length``
(`sdk._request_block`), says what h2 would have encoded, and is read right on a connection whatever its
HPACK state: between requests h2 encoded with its dynamic table, and after a table size change."""

from __future__ import annotations

import h2.config
import h2.connection
import h2.events
import h2.settings
import pytest
import s2_sdk
from hpack import Decoder

from s2_sink._transport import h2_frames, sdk
from s2_sink._transport.append_session import basin_transport
from tests.unit.transport._odd_servers import h2_pair

_EXTRA = {"content-type": "application/x-protobuf", "accept": "application/x-protobuf"}


def _transport(
    compression: s2_sdk.Compression = s2_sdk.Compression.NONE, token: str = "a-secret-token"
) -> sdk.HttpClient:
    endpoints = s2_sdk.Endpoints(account="http://127.0.0.1:9", basin="http://127.0.0.1:9")
    client = s2_sdk.S2(token, endpoints=endpoints, compression=compression)
    return basin_transport(client, "b")


def _expected(transport: sdk.HttpClient, path: str, length: int | None) -> list[tuple[str, str]]:
    """What ``unary_request`` sends: a ``POST`` of `length` bytes, or a ``GET`` (`length` None)."""
    if length is None:
        return transport._build_headers("GET", path, _EXTRA)
    headers = transport._build_headers("POST", path, _EXTRA)
    if transport._compression != s2_sdk.Compression.NONE:
        headers.append(("content-encoding", sdk._COMPRESSION_ENCODING[transport._compression]))
    return [*headers, ("content-length", str(length))]


@pytest.mark.parametrize("token", ["a-secret-token", ""], ids=["token", "no token"])
def test_the_block_holds_the_headers_unary_request_sends(token: str) -> None:
    """Decoded, the block is what h2 sends for the transport's headers, the extra ones, content-encoding and
    content-length (normalized as h2 does: without a token, the SDK's ``Bearer `` loses its trailing space,
    which the server's h2 refused), pseudo-headers first; two paths share the constant part."""
    for compression in (s2_sdk.Compression.NONE, s2_sdk.Compression.ZSTD):
        transport = _transport(compression, token)
        cases = (
            ("/v1/streams/a%2Fb/records", 12),
            ("/v1/streams/tenant-7/records", 104_857),
            ("/v1/streams/a%2Fb/records?seq_num=5&count=100", None),  # a unary read (`sdk.get_corked`)
        )
        for path, length in cases:
            decoded = Decoder().decode(sdk._request_block(transport, path, _EXTRA, length))
            client, server = h2_pair()
            client.send_headers(client.get_next_available_stream_id(), _expected(transport, path, length))
            (sent,) = _received(client, server)
            assert sorted(decoded) == sorted(sent)
            names = [name for name, _ in decoded]
            assert names.index(":path") < min(i for i, n in enumerate(names) if not n.startswith(":"))
            assert ("authorization", f"Bearer {token}".strip()) in decoded


def _received(
    client: h2.connection.H2Connection, server: h2.connection.H2Connection
) -> list[list[tuple[str, str]]]:
    events = server.receive_data(client.data_to_send())
    return [list(e.headers) for e in events if isinstance(e, h2.events.RequestReceived)]


@pytest.mark.parametrize("token", ["a-secret-token", ""], ids=["token", "no token"])
def test_the_block_reads_right_between_requests_h2_encodes_itself(token: str) -> None:
    """h2's own requests fill the connection's dynamic table; the blocks in between neither use nor disturb
    it: the server decodes every request as sent."""
    transport = _transport(token=token)
    client, server = h2_pair()
    sent: list[list[tuple[str, str]]] = []
    for i in range(8):
        path, length = f"/v1/streams/s{i}/records", 100 + i if i < 4 else None  # POSTs, then GETs
        if i % 2:
            block = sdk._request_block(transport, path, _EXTRA, length)
            h2_frames.open_stream(client, block, end_stream=length is None)
        else:
            sid = client.get_next_available_stream_id()
            client.send_headers(sid, _expected(transport, path, length), end_stream=length is None)
        sent.append([(k, v.strip()) for k, v in _expected(transport, path, length)])  # as h2 normalizes
    assert [sorted(h) for h in _received(client, server)] == [sorted(h) for h in sent]
    # The server's h2 validated every request (whitespace, case, pseudo-headers) as it would h2's own.
    assert client.config.validate_outbound_headers, "h2's validation was left off"
    assert client.config.normalize_outbound_headers, "h2's normalizing was left off"


def test_a_table_size_change_is_signalled_before_the_block() -> None:
    """After the server shrinks the HPACK table, the client's next block must start with the size update
    (RFC 7541, 4.2): h2's encoder's, before the block encoded already."""
    transport = _transport()
    client, server = h2_pair()
    sid = client.get_next_available_stream_id()
    client.send_headers(sid, _expected(transport, "/v1/streams/x/records", 1))
    _received(client, server)
    server.update_settings({h2.settings.SettingCodes.HEADER_TABLE_SIZE: 256})
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())  # the settings' ack
    assert client.encoder.header_table.resized
    block = sdk._request_block(transport, "/v1/streams/y/records", _EXTRA, 7)
    h2_frames.open_stream(client, block, end_stream=False)
    assert not client.encoder.header_table.resized, "the size update was not sent"
    (headers,) = _received(client, server)
    assert sorted(headers) == sorted(_expected(transport, "/v1/streams/y/records", 7))


def test_a_get_ends_its_stream_with_its_headers() -> None:
    """A ``GET`` (`sdk.get_corked`) has no body: its HEADERS frame ends the stream, no DATA frame follows."""
    transport = _transport()
    client, server = h2_pair()
    block = sdk._request_block(transport, "/v1/streams/x/records?seq_num=0&count=10", _EXTRA, None)
    h2_frames.open_stream(client, block, end_stream=True)
    events = server.receive_data(client.data_to_send())
    assert [type(e) for e in events] == [h2.events.RequestReceived, h2.events.StreamEnded]
    assert ("content-length", "0") not in events[0].headers
