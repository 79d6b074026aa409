"""Real servers that are not S2, for failure wording tests: each runs on a daemon thread of the test
process and is closed by its context manager."""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
from collections.abc import Callable, Iterator

import h2.config
import h2.connection
import h2.events


def _listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


@contextlib.contextmanager
def _serving(handle: object) -> Iterator[str]:
    sock = _listener()
    conns: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            conns.append(conn)
            if callable(handle):
                threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.close()


def _answer_404(open_streams: list[int], conn: socket.socket) -> None:
    """Speak HTTP/2 and answer every request 404 with a plain-text body, as a web server or proxy would; after
    each read, how many of its streams are still open goes to `open_streams`."""
    h2c = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
    h2c.initiate_connection()
    with contextlib.suppress(OSError):
        conn.sendall(h2c.data_to_send())
        while data := conn.recv(65536):
            for event in h2c.receive_data(data):
                # Answer on the headers, as a proxy does, even if the body (an append stream) goes on.
                if isinstance(event, h2.events.RequestReceived):
                    sid = event.stream_id
                    h2c.send_headers(sid, [(":status", "404"), ("content-type", "text/plain")])
                    h2c.send_data(sid, b"404 page not found", end_stream=True)
            conn.sendall(h2c.data_to_send())
            open_streams.append(h2c.open_inbound_streams)


def plain_http2_404(open_streams: list[int] | None = None) -> contextlib.AbstractContextManager[str]:
    """An h2c server answering 404 "page not found" (no S2 error code) to everything (`_answer_404`); yields
    its URL."""
    return _serving(functools.partial(_answer_404, [] if open_streams is None else open_streams))


def silent() -> contextlib.AbstractContextManager[str]:
    """A server that accepts TCP connections and never sends a byte; yields its URL."""
    return _serving(None)


Answer = Callable[[bytes], tuple[list[tuple[str, str]], bytes] | None]
"""A request's body -> the answer's header fields and body, or None: no answer at all."""


def _answering(answer: Answer, conn: socket.socket) -> None:
    """Speak HTTP/2 with the default windows (65,535 bytes), answer each request once its body is whole,
    as `answer` says; header fields are sent as given (not lower-cased or checked)."""
    config = h2.config.H2Configuration(
        client_side=False, validate_outbound_headers=False, normalize_outbound_headers=False
    )
    h2c = h2.connection.H2Connection(config)
    h2c.initiate_connection()
    bodies: dict[int, bytes] = {}
    with contextlib.suppress(OSError):
        conn.sendall(h2c.data_to_send())
        while data := conn.recv(65536):
            for event in h2c.receive_data(data):
                if isinstance(event, h2.events.DataReceived):
                    bodies[event.stream_id] = bodies.get(event.stream_id, b"") + event.data
                    h2c.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    reply = answer(bodies.pop(event.stream_id, b""))
                    if reply is not None:
                        h2c.send_headers(event.stream_id, reply[0])
                        h2c.send_data(event.stream_id, reply[1], end_stream=True)
            conn.sendall(h2c.data_to_send())


def answering(answer: Answer) -> contextlib.AbstractContextManager[str]:
    """An h2c server answering each request as `answer` says (`_answering`); yields its URL."""
    return _serving(functools.partial(_answering, answer))


Reply = Callable[[h2.connection.H2Connection, int, str], None]
"""The server's connection, a request's stream id and path -> the answer's frames queued on it."""


def _replying(reply: Reply, conn: socket.socket) -> None:
    """Speak HTTP/2 and answer each request once its body is whole, as `reply` queues it."""
    config = h2.config.H2Configuration(
        client_side=False, validate_outbound_headers=False, normalize_outbound_headers=False
    )
    h2c = h2.connection.H2Connection(config)
    h2c.initiate_connection()
    paths: dict[int, str] = {}
    with contextlib.suppress(OSError):
        conn.sendall(h2c.data_to_send())
        while data := conn.recv(65536):
            for event in h2c.receive_data(data):
                if isinstance(event, h2.events.RequestReceived):
                    paths[event.stream_id] = dict(event.headers)[b":path"].decode()
                elif isinstance(event, h2.events.DataReceived):
                    h2c.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                elif isinstance(event, h2.events.StreamEnded):
                    reply(h2c, event.stream_id, paths.pop(event.stream_id))
                    conn.sendall(h2c.data_to_send())
            conn.sendall(h2c.data_to_send())


def replying(reply: Reply) -> contextlib.AbstractContextManager[str]:
    """An h2c server answering each request as `reply` queues it (`_replying`); yields its URL."""
    return _serving(functools.partial(_replying, reply))


def h2_pair() -> tuple[h2.connection.H2Connection, h2.connection.H2Connection]:
    """An h2 client and server, their connection prefaces and settings exchanged (bytes passed by hand)."""
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
    server = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding="utf-8"))
    client.initiate_connection()
    server.initiate_connection()
    server.receive_data(client.data_to_send())
    client.receive_data(server.data_to_send())
    server.receive_data(client.data_to_send())
    return client, server
