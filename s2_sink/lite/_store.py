"""Basins and streams: the S2 control plane's state, in memory, answering as the official s2-lite does
(``lite/src/backend/streams.rs``, ``basins.rs``; the status codes of ``lite/src/handlers/v1/error.rs``).

Everything here runs on the server's single event loop thread, so no locks. Stream data lives in
``_stream``; the durable log (``_durability``) replays into the same calls.

- Create (``POST``) makes a stream or basin or answers 409 ``resource_already_exists`` (a retry carrying the
  same ``s2-request-token`` and config is answered as a success); ensure (``PUT``) creates it or *sets* its
  config to what it asks for, merged with the basin defaults (`_configs.merge`), answering ``created``,
  ``updated`` or ``noop``.
- Deletes are asynchronous, as in S2. Deleting a stream appends a terminal ``trim`` command record (live
  readers see it), ends its sessions (an open append session's next input gets 503 ``unavailable``, as S2's
  streamer is gone) and leaves it *deleting*: listed with ``deleted_at``, every other request for it
  (create, get, reconfigure, check-tail, append, read) gets 409 ``stream_deletion_pending``. The background
  janitor (``finish_deletions``) removes it ``deletion_delay_s`` later; then it is 404. A basin's deletion
  deletes its streams; its config can still be read while it is pending. The durable log records the delete
  at once, so a restart completes it.
- Which 404: a stream request names its stream first, its basin only when the stream is missing (S2 looks the
  stream up, then the basin to auto-create it), so a missing stream in a missing basin is ``basin_not_found``
  for data requests, but ``stream_not_found`` for get-config and delete, which never look at the basin, and
  listing a missing basin's streams finds none.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from s2_sink.lite._api_errors import conflict, not_found
from s2_sink.lite._batch import Batch
from s2_sink.lite._clock import Clock, rfc3339
from s2_sink.lite._configs import (
    Json,
    merge,
    parse_basin_config,
    parse_stream_config,
    reconfigure_basin,
    reconfigure_stream,
)
from s2_sink.lite._names import validate_basin_name, validate_stream_name
from s2_sink.lite._stream import Stream

__all__ = ["DELETION_DELAY_S", "Basin", "Store", "validate_basin_name", "validate_stream_name"]

#: How long a deletion stays pending before the janitor completes it (server clock), by default.
DELETION_DELAY_S = 0.5


@dataclass(eq=False)
class Basin:
    """A basin: configuration and streams."""

    name: str
    config: Json
    created_at: float
    #: The request token and config of the create call, so a retried create is answered as a success.
    creation_key: tuple[str, Json] | None = None
    streams: dict[str, Stream] = field(default_factory=dict)
    #: When its deletion was asked for (epoch seconds), while it is pending.
    deleted_at: float | None = None

    def info(self) -> Json:
        """BasinInfo JSON."""
        deleting = self.deleted_at is not None
        return {
            "name": self.name,
            "location": None,
            "created_at": rfc3339(self.created_at),
            "deleted_at": rfc3339(self.deleted_at) if self.deleted_at is not None else None,
            "state": "deleting" if deleting else "active",
        }


class Store:
    """All basins. Mutations of metadata are reported to ``on_meta`` (the durable log) as JSON documents."""

    def __init__(self, clock: Clock | None = None, *, deletion_delay_s: float = DELETION_DELAY_S) -> None:
        self.basins: dict[str, Basin] = {}
        self.on_meta: Callable[[Json], None] | None = None
        #: Makes a stream's terminal trim durable, then visible (the server's appender); None: at once.
        self.commit_terminal: Callable[[Stream, Batch], None] | None = None
        self.clock = clock or Clock()
        #: How long a deletion stays pending (409 ``*_deletion_pending``) before it completes (404).
        self.deletion_delay_s = deletion_delay_s

    def _log(self, doc: Json) -> None:
        if self.on_meta is not None:
            self.on_meta(doc)

    # -- basins ----------------------------------------------------------------------------------------------

    def basin(self, name: str) -> Basin:
        """The basin; 404 ``basin_not_found``, or 409 ``basin_deletion_pending`` while it is being deleted."""
        b = self._basin(name)
        if b.deleted_at is not None:
            raise conflict("basin_deletion_pending", f"basin `{name}` is being deleted")
        return b

    def _basin(self, name: str) -> Basin:
        b = self.basins.get(name)
        if b is None:
            raise not_found("basin_not_found", f"basin `{name}` not found")
        return b

    def basin_config(self, name: str) -> Json:
        """A basin's config: readable while its deletion is pending, as in S2 (``get_basin_config``)."""
        return self._basin(name).config

    def put_basin(self, name: str, config: Json, created_at: float) -> Basin:
        """Create (or replace on replay) a basin with a complete config."""
        b = self.basins.get(name)
        if b is None:
            b = Basin(name, config, created_at)
            self.basins[name] = b
        else:
            b.config = config
        self._log({"op": "basin", "name": name, "config": config, "created_at": created_at})
        return b

    def create_basin(self, name: str, doc: Any, request_token: str | None) -> tuple[Basin, bool]:
        """POST semantics: (basin, created). A retry with the same request token and config is a no-op;
        otherwise 409 if it exists."""
        config = parse_basin_config(doc)
        existing = self.basins.get(name)
        if existing is not None:
            if existing.deleted_at is not None:
                raise conflict("basin_deletion_pending", f"basin `{name}` is being deleted")
            if request_token is not None and existing.creation_key == (request_token, config):
                return existing, False
            raise conflict("resource_already_exists", f"basin `{name}` already exists")
        b = self.put_basin(name, config, self.clock.time())
        b.creation_key = None if request_token is None else (request_token, config)
        return b, True

    def ensure_basin(self, name: str, doc: Any) -> tuple[Basin, str]:
        """PUT semantics: (basin, ``created|updated|noop``); an existing basin's config becomes the one asked
        for (nothing asked: the defaults)."""
        config = parse_basin_config(doc)
        existing = self.basins.get(name)
        if existing is None:
            return self.put_basin(name, config, self.clock.time()), "created"
        if existing.deleted_at is not None:
            raise conflict("basin_deletion_pending", f"basin `{name}` is being deleted")
        if config == existing.config:
            return existing, "noop"
        return self.put_basin(name, config, existing.created_at), "updated"

    def reconfigure_basin(self, name: str, patch: Any) -> Basin:
        """PATCH semantics."""
        b = self.basin(name)
        return self.put_basin(name, reconfigure_basin(b.config, patch), b.created_at)

    def delete_basin(self, name: str) -> None:
        """Start deleting a basin and its streams (asking again while it is pending changes nothing)."""
        b = self._basin(name)
        if b.deleted_at is not None:
            return
        b.deleted_at = self.clock.time()
        for s in b.streams.values():
            if s.deleted_at is None:
                self._terminate(s, b.deleted_at)
        self._log({"op": "basin_del", "name": name})

    def finish_deletions(self) -> int:
        """Remove the basins and streams whose deletion has been pending ``deletion_delay_s``; how many."""
        due = self.clock.time() - self.deletion_delay_s
        done = 0
        for name, b in list(self.basins.items()):
            if b.deleted_at is not None:
                if b.deleted_at <= due:
                    del self.basins[name]
                    done += 1
                continue
            for sname, s in list(b.streams.items()):
                if s.deleted_at is not None and s.deleted_at <= due:
                    del b.streams[sname]
                    done += 1
        return done

    # -- streams ---------------------------------------------------------------------------------------------

    def stream(self, basin: str, name: str, *, auto_create: str | None = None) -> Stream:
        """The stream of a data request (append, read, check-tail): 409 while it is being deleted; when
        missing, auto-created if the basin's ``create_stream_on_<auto_create>`` is set (with the basin's
        defaults), else 404 ``stream_not_found``, or ``basin_not_found`` without its basin."""
        b = self.basins.get(basin)
        s = b.streams.get(name) if b is not None else None
        if s is not None:
            if s.deleted_at is not None:
                raise conflict("stream_deletion_pending", "stream deletion pending")
            return s
        b = self._basin(basin)
        if auto_create is not None and b.config.get(f"create_stream_on_{auto_create}"):
            if b.deleted_at is not None:
                raise conflict("basin_deletion_pending", f"basin `{basin}` is being deleted")
            config = merge(parse_stream_config(None), b.config["default_stream_config"])
            return self.put_stream(basin, name, config, self.clock.time())
        raise not_found("stream_not_found", f"stream `{name}` in basin `{basin}` not found")

    def stream_config(self, basin: str, name: str) -> Json:
        """GET a stream's config (the stream alone is looked up, not its basin)."""
        b = self.basins.get(basin)
        s = b.streams.get(name) if b is not None else None
        if s is None:
            raise not_found("stream_not_found", f"stream `{name}` in basin `{basin}` not found")
        if s.deleted_at is not None:
            raise conflict("stream_deletion_pending", "stream deletion pending")
        return s.config

    def streams_of(self, basin: str) -> dict[str, Stream]:
        """A basin's streams, deleting ones included (none for a basin that does not exist, as S2 lists)."""
        b = self.basins.get(basin)
        return {} if b is None else b.streams

    def put_stream(
        self, basin: str, name: str, config: Json, created_at: float, cipher: str | None = None
    ) -> Stream:
        """Create (or reconfigure) a stream with a complete config; a new one takes the basin's cipher (or
        `cipher`, on replay), as S2 records it at creation."""
        b = self._basin(basin)
        s = b.streams.get(name)
        if s is None:
            s = Stream(basin, name, config, created_at)
            s.cipher = cipher if cipher is not None else b.config.get("stream_cipher")
            b.streams[name] = s
        else:
            s.config = config
        doc = {"op": "stream", "basin": basin, "name": name, "config": config, "created_at": created_at}
        self._log({**doc, "cipher": s.cipher} if s.cipher is not None else doc)
        return s

    def _existing(self, basin: str, name: str) -> tuple[Basin, Stream | None]:
        """The (live) basin and the stream if it exists; 409 if the stream is being deleted."""
        b = self.basin(basin)
        s = b.streams.get(name)
        if s is not None and s.deleted_at is not None:
            raise conflict("stream_deletion_pending", "stream deletion pending")
        return b, s

    def create_stream(
        self, basin: str, name: str, doc: Any, request_token: str | None = None
    ) -> tuple[Stream, bool]:
        """POST semantics: (stream, created); 409 ``resource_already_exists`` if it exists, unless this is a
        retry carrying the same request token and config."""
        opt = parse_stream_config(doc)
        b, existing = self._existing(basin, name)
        if existing is not None:
            if request_token is not None and existing.creation_key == (request_token, opt):
                return existing, False
            raise conflict("resource_already_exists", f"stream `{name}` in basin `{basin}` already exists")
        s = self.put_stream(basin, name, merge(opt, b.config["default_stream_config"]), self.clock.time())
        s.creation_key = None if request_token is None else (request_token, opt)
        return s, True

    def ensure_stream(self, basin: str, name: str, doc: Any) -> tuple[Stream, str]:
        """PUT semantics: (stream, ``created|updated|noop``). An existing stream's config becomes the one
        asked for merged with the basin defaults: fields not asked for are reset to the defaults."""
        opt = parse_stream_config(doc)
        b, s = self._existing(basin, name)
        config = merge(opt, b.config["default_stream_config"])
        if s is None:
            return self.put_stream(basin, name, config, self.clock.time()), "created"
        if config == s.config:
            return s, "noop"
        return self.put_stream(basin, name, config, s.created_at), "updated"

    def reconfigure_stream(self, basin: str, name: str, patch: Any) -> Stream:
        """PATCH semantics: the fields given change; a field given as null takes the basin's default."""
        b, s = self._existing(basin, name)
        if s is None:
            raise not_found("stream_not_found", f"stream `{name}` in basin `{basin}` not found")
        config = reconfigure_stream(s.config, patch, b.config["default_stream_config"])
        return self.put_stream(basin, name, config, s.created_at)

    def delete_stream(self, basin: str, name: str) -> None:
        """Start deleting a stream (asking again while pending is a no-op): its terminal trim record is
        appended and its sessions end."""
        b = self.basins.get(basin)
        s = b.streams.get(name) if b is not None else None
        if s is None:
            raise not_found("stream_not_found", f"stream `{name}` in basin `{basin}` not found")
        if s.deleted_at is not None:
            return
        self._terminate(s, self.clock.time())
        self._log({"op": "stream_del", "basin": basin, "name": name})

    def _terminate(self, s: Stream, when: float) -> None:
        """The terminal trim (S2's ``append_terminal_trim``), then the stream is deleting."""
        batch = s.sequence_terminal(self.clock.now_ms())
        if self.commit_terminal is not None:
            self.commit_terminal(s, batch)
        else:
            s.make_visible(batch.end, batch.last_ts)
        s.deleted = True
        s.deleted_at = when
        s.notify()

    def iter_streams(self) -> Iterator[Stream]:
        """Every stream of every basin."""
        for b in self.basins.values():
            yield from b.streams.values()
