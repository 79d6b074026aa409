"""The contract with s2-sdk's private parts: every name and attribute `s2_sink._transport.sdk` relies on.

An SDK release that renamed or moved one fails here with the name of the attribute, instead of failing
somewhere in a bulk append or read. The static part needs only the installed SDK (no server), so it runs
against any s2-sdk release in a scratch environment
(``python -m pytest tests/unit/transport/test_sdk_contract.py -k names``); the live part checks the
attributes of real objects, a client's connections to the lite server.
"""

from __future__ import annotations

import asyncio
import importlib

import pytest
import s2_sdk

from s2_sink._transport import sdk
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin

# (module, attribute) pairs the boundary imports.
NAMES = (
    ("s2_sdk._generated.s2.v1.s2_pb2", "AppendInput"),
    ("s2_sdk._generated.s2.v1.s2_pb2", "ReadBatch"),
    ("s2_sdk._client", "HttpClient"),
    ("s2_sdk._client", "Response"),
    ("s2_sdk._client", "_COMPRESSION_ENCODING"),
    ("s2_sdk._client", "_ENCODING_COMPRESSION"),
    ("s2_sdk._client", "_header_value"),
    ("s2_sdk._client", "_raise_response_error"),
    ("s2_sdk._compression", "compress"),
    ("s2_sdk._compression", "decompress"),
    ("s2_sdk._exceptions", "AppendIndefiniteFailureError"),
    ("s2_sdk._exceptions", "ConnectError"),
    ("s2_sdk._exceptions", "ProtocolError"),
    ("s2_sdk._exceptions", "ReadTimeoutError"),
    ("s2_sdk._exceptions", "S2ClientError"),
    ("s2_sdk._exceptions", "ServerDrainingError"),
    ("s2_sdk._exceptions", "TransportError"),
    ("s2_sdk._exceptions", "normalize_exception"),
    ("s2_sdk._mappers", "append_ack_from_proto"),
    ("s2_sdk._mappers", "append_input_to_proto"),
    ("s2_sdk._retrier", "AdvisedReconnectLimiter"),
    ("s2_sdk._retrier", "requires_reconnect"),
    ("s2_sdk._s2s", "_stream_records_path"),
    ("s2_sdk._s2s._protocol", "Message"),
    ("s2_sdk._s2s._protocol", "frame_message"),
    ("s2_sdk._s2s._protocol", "maybe_compress"),
    ("s2_sdk._s2s._protocol", "parse_error_info"),
    ("s2_sdk._s2s._protocol", "read_messages"),
    ("s2_sdk._types", "_S2_ENCRYPTION_KEY_HEADER"),
    # A unary append's header block (`sdk._request_block`) is normalized by h2 and encoded by hpack.
    ("h2.utilities", "HeaderValidationFlags"),
    ("h2.utilities", "normalize_outbound_headers"),
    ("h2.utilities", "utf8_encode_headers"),
    ("h2.utilities", "validate_outbound_headers"),
    ("hpack", "Encoder"),
    ("hpack", "Decoder"),
    ("hpack", "NeverIndexedHeaderTuple"),
    ("hpack.hpack", "encode_integer"),
)


@pytest.mark.parametrize(("module", "name"), NAMES, ids=[f"{m}.{n}" for m, n in NAMES])
def test_names_the_boundary_imports_exist(module: str, name: str) -> None:
    """Each private module and name the boundary imports is in the installed SDK."""
    try:
        found = importlib.import_module(module)
    except ImportError as exc:
        pytest.fail(f"s2-sdk {s2_sdk.__version__} has no module {module} ({exc})")
    assert hasattr(found, name), f"s2-sdk {s2_sdk.__version__}: {module} has no attribute {name}"


def test_names_the_boundary_behave_as_relied_on() -> None:
    """The framing round-trips a message and the path escapes a stream name, as the bulk sessions use them."""
    from s2_sink._transport import sdk

    assert sdk.stream_records_path("a/b") == "/v1/streams/a%2Fb/records"
    framed = sdk.frame_message(sdk.Message(b"body", terminal=False, compression=s2_sdk.Compression.NONE))

    async def parse() -> list[bytes]:
        async def chunks():  # type: ignore[no-untyped-def]
            yield framed

        return [m.body async for m in sdk.read_messages(chunks())]

    assert asyncio.run(parse()) == [b"body"]


def test_a_unary_request_has_every_field_of_the_sdks_request_state() -> None:
    """`sdk._Unary` stands where the SDK's connection keeps a request's state (``_StreamState``): it has
    each of that state's fields, so an SDK release that adds one is named here."""
    import dataclasses

    from s2_sdk._client import _StreamState

    fields = {f.name for f in dataclasses.fields(_StreamState)}
    assert {"response_headers", "data_queue", "ended", "error", "end_stream_received"} <= fields
    loop = asyncio.new_event_loop()
    try:
        request = sdk._Unary(loop.create_future(), bytes, sdk.normalize_exception)
        missing = {f for f in fields if not hasattr(request, f)}
    finally:
        loop.close()
    assert not missing, f"s2-sdk {s2_sdk.__version__}: {missing}"


def _missing(obj: object, path: str) -> str | None:
    """The first attribute along ``path`` (dotted) that ``obj`` lacks, else None."""
    for part in path.split("."):
        if not hasattr(obj, part):
            return f"{type(obj).__module__}.{type(obj).__qualname__}.{part}"
        obj = getattr(obj, part)
    return None


def test_attributes_of_live_objects_the_boundary_reaches(lite: LiteServer) -> None:
    """The client, stream handle, retry settings and pooled connections have the internals the boundary
    reads, on real objects connected to the lite server."""
    from s2_sink._transport import sdk

    basin = fresh_basin(lite.endpoint)

    async def check() -> list[str]:
        endpoints = s2_sdk.Endpoints(account=lite.endpoint, basin=lite.endpoint)
        async with s2_sdk.S2("test", endpoints=endpoints) as client:
            stream = client.basin(basin).stream("contract")
            await stream.append(s2_sdk.AppendInput(records=[s2_sdk.Record(body=b"x")]))
            missing = [
                m
                for obj, path in (
                    (client, "_get_basin_client"),
                    (stream, "_client"),
                    (stream, "_encryption_key"),
                )
                if (m := _missing(obj, path))
            ]
            if missing:
                return missing
            transport = sdk.stream_transport(stream)
            assert sdk.basin_transport(client, basin) is not None
            paths = (
                "_pool._hosts",
                "_pool._closed",
                "_pool._ensure_reaper",
                "_pool.checkout",
                "_base_url",
                "_build_headers",
                "_compression",
                "_request_timeout",
                "unary_request",
            )
            missing += [m for path in paths if (m := _missing(transport, path))]
            if missing:
                return missing
            conns = list(sdk.pooled_connections(transport))
            assert conns, "no pooled connection after an append: the pool walk finds nothing"
            for conn in conns:
                paths = (
                    "_h2",
                    "is_available",
                    "_write_lock",
                    "_flush",
                    "_pending_streams",
                    "_streams",
                    "_fail_stream",
                    "send_data",
                    "reset_stream",
                    "ack_all_data",
                    "release_stream",
                )
                missing += [m for path in paths if (m := _missing(conn, path))]
            for pooled in transport._pool._hosts[transport._base_url]:
                paths = ("_conn", "has_capacity", "retire", "touch_idle", "is_retired", "is_idle", "close")
                missing += [m for path in paths if (m := _missing(pooled, path))]
            state = sdk.h2_state(conns[0])
            assert state is not None
            assert hasattr(state, "update_settings")
            # A unary request's frames are written and read without h2 (`h2_frames`), beside h2's own.
            paths = (
                "encoder.header_table.resized",
                "decoder",
                "receive_data",
                "get_next_available_stream_id",
                "highest_outbound_stream_id",
                "outbound_flow_control_window",
                "remote_settings.initial_window_size",
                "max_outbound_frame_size",
                "_data_to_send",
                "incoming_buffer._data",
            )
            missing += [m for path in paths if (m := _missing(state, path))]
            await sdk.advertise_settings(conns[0], {})
            return missing

    missing = asyncio.run(check())
    assert not missing, f"s2-sdk {s2_sdk.__version__} moved: {', '.join(missing)}"
