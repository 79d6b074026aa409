"""The HTTP/2 connection under the bulk append sessions, shared as the SDK's client shares it, and its drop.

In the SDK an ``S2`` client owns one ``ConnectionPool``; every ``HttpClient`` it hands out (the account's,
each basin's: ``S2._get_basin_client``) checks its requests out of that pool, and requests to one endpoint
share one HTTP/2 connection (a second one only past the server's ``max_concurrent_streams``, far more
streams than a schedule opens). The bulk path opens its sessions on the session pool's shared client
(`_transport.runtime.SessionPool.client`), so every bulk session a process opens to the basin is a
stream of one connection: those of all its tasks, a zombie's of an earlier run in the same process
included. A retired connection (S2's reconnect advice, a GOAWAY) takes no new stream, the next request opens
a fresh connection, and the streams already on it go on.

A connection drops as the SDK sees it (``s2_sdk._client.Connection``):

- reset (a reset TCP connection, a proxy's idle timeout, the server gone): its receive loop reads the end of
  the socket and fails every open stream with ``ConnectionClosedError("Connection closed by remote")``,
  after the frames that arrived before it. Each session's messages sent and not yet answered may have been
  applied, the ack lost, or not: the server applies a session's messages in order and stops at the first
  one it did not get or could not apply, so what was applied is a prefix, drawn message by message;
- GOAWAY: the server names the last stream it processed; each stream above it fails with
  ``ProtocolError("GOAWAY received: error_code=0, last_stream_id=N")``, known to be unprocessed (nothing of
  it applied, so it can only be a stream none of whose messages was applied yet); the streams at or below
  it go on and may finish.
"""

from __future__ import annotations

import random
from typing import Final, Protocol

from s2_sdk._exceptions import ConnectionClosedError, ProtocolError, TransportError

__all__ = ["ConnectionStream", "MemoryConnection"]

_GOAWAY_SHARE: Final = 0.3
"""Of the drops, how many are a GOAWAY (the others a reset)."""
_APPLIED_ODDS: Final = 0.5
"""The odds that the server applied a message in flight, given that it applied the one before."""


class ConnectionStream(Protocol):
    """An open stream of a connection (an append session's response), as a drop sees it."""

    @property
    def touched(self) -> bool:
        """Whether the server processed any of its messages (so it is not above a GOAWAY's last stream)."""

    def in_flight(self) -> int:
        """How many of its messages were sent and not answered."""

    def fail(self, error: TransportError, applied: int) -> str:
        """End the stream with `error`, the first `applied` messages in flight applied (until one is
        refused); a line on what became of it."""


class MemoryConnection:
    """One HTTP/2 connection of an SDK client's pool to the basin endpoint."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.retired = False
        """It takes no new stream (reconnect advice, a GOAWAY, a drop)."""
        self._streams: dict[int, ConnectionStream] = {}
        self._next_id = 1  # client-initiated HTTP/2 streams have odd ids, rising

    def open(self, stream: ConnectionStream) -> int:
        """Open `stream` on the connection; its stream id."""
        assert not self.retired, "a retired connection takes no new stream"
        stream_id = self._next_id
        self._next_id += 2
        self._streams[stream_id] = stream
        return stream_id

    def close(self, stream_id: int) -> None:
        """The stream ended (or the request gave up on it)."""
        self._streams.pop(stream_id, None)

    def drop(self, rng: random.Random) -> tuple[int, str]:
        """The connection drops (a reset or a GOAWAY, drawn from `rng`): fail its streams as the SDK does
        (module docstring). How many streams it ended, and a line for the trace."""
        self.retired = True
        ids = sorted(self._streams)
        ended: list[str] = []
        if rng.random() < _GOAWAY_SHARE:
            processed = max((i for i in ids if self._streams[i].touched), default=0)
            last = rng.choice([processed, *(i for i in ids if i > processed)])
            goaway = ProtocolError(f"GOAWAY received: error_code=0, last_stream_id={last}", error_code=0)
            ended = [self._streams.pop(i).fail(goaway, 0) for i in ids if i > last]
            what = f"GOAWAY last_stream_id={last} ({len(ids)} open)"
        else:
            reset = ConnectionClosedError("Connection closed by remote")
            for i in ids:
                stream = self._streams.pop(i)
                applied = 0
                while applied < stream.in_flight() and rng.random() < _APPLIED_ODDS:
                    applied += 1
                ended.append(stream.fail(reset, applied))
            what = "reset"
        return len(ended), f"connection {self.number} {what}: {len(ended)} sessions end: {'; '.join(ended)}"
