"""Basins and streams: the S2 control plane's state, in memory.

Everything here runs on the server's single event loop thread, so no locks. Stream data lives in
``_stream``; the durable log (``_durability``) replays into the same calls.

Deletes are asynchronous, as in S2: a deleted basin or stream first enters a *deleting* state (listed with
``deleted_at``; other requests for it get 409 ``*_deletion_pending``; its sessions end) and is removed by the
background janitor (``finish_deletions``) ``DELETION_DELAY_S`` later. The durable log records the delete at
once, so a restart completes it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from s2_sink.lite._clock import Clock, rfc3339
from s2_sink.lite._configs import Json, apply_basin_config, apply_stream_config, default_basin_config
from s2_sink.lite._errors import conflict, invalid, not_found
from s2_sink.lite._stream import Stream

__all__ = ["DELETION_DELAY_S", "Basin", "Store"]

#: How long a deletion stays pending before the janitor completes it (server clock).
DELETION_DELAY_S = 0.5

_BASIN_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def validate_basin_name(name: str) -> None:
    """8-48 chars of ``[a-z0-9-]``, not starting or ending with a hyphen."""
    if not (8 <= len(name) <= 48 and _BASIN_RE.match(name)):
        raise invalid(
            f"basin name must be 8-48 characters of [a-z0-9-] not starting or ending with '-', got {name!r}"
        )


def validate_stream_name(name: str) -> None:
    """1-512 bytes of UTF-8 without NUL, not ``.`` or ``..`` (s2-lite's ``StreamNameStr::validate_str``)."""
    if not (1 <= len(name.encode()) <= 512) or "\x00" in name or name in (".", ".."):
        raise invalid(f"stream name must be 1-512 bytes without NUL, not '.' or '..', got {name!r}")


@dataclass(eq=False)
class Basin:
    """A basin: configuration and streams."""

    name: str
    config: Json
    created_at: float
    request_token: str | None = None
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

    def __init__(self, clock: Clock | None = None) -> None:
        self.basins: dict[str, Basin] = {}
        self.on_meta: Callable[[Json], None] | None = None
        self.clock = clock or Clock()

    def _log(self, doc: Json) -> None:
        if self.on_meta is not None:
            self.on_meta(doc)

    # -- basins ----------------------------------------------------------------------------------------------

    def basin(self, name: str) -> Basin:
        """The basin; 404 ``basin_not_found``, or 409 ``basin_deletion_pending`` while it is being deleted."""
        b = self.basins.get(name)
        if b is None:
            raise not_found("basin_not_found", f"basin {name!r} not found")
        if b.deleted_at is not None:
            raise conflict("basin_deletion_pending", f"basin {name!r} is being deleted")
        return b

    def put_basin(
        self, name: str, config: Json, created_at: float, request_token: str | None = None
    ) -> Basin:
        """Create (or replace on replay) a basin with a complete config."""
        b = self.basins.get(name)
        if b is None:
            b = Basin(name, config, created_at, request_token)
            self.basins[name] = b
        else:
            b.config = config
        self._log({"op": "basin", "name": name, "config": config, "created_at": created_at})
        return b

    def create_basin(self, name: str, patch: Any, request_token: str | None) -> tuple[Basin, bool]:
        """
        POST semantics: (basin, created). A replayed request token is a no-op; otherwise 409 if it exists."""
        validate_basin_name(name)
        existing = self.basins.get(name)
        if existing is not None:
            if existing.deleted_at is not None:
                raise conflict("basin_deletion_pending", f"basin {name!r} is being deleted")
            if request_token is not None and existing.request_token == request_token:
                return existing, False
            raise conflict("resource_already_exists", f"basin {name!r} already exists")
        config = apply_basin_config(default_basin_config(), patch)
        return self.put_basin(name, config, self.clock.time(), request_token), True

    def ensure_basin(self, name: str, patch: Any) -> tuple[Basin, str]:
        """PUT semantics: (basin, provision result ``created|updated|noop``)."""
        validate_basin_name(name)
        existing = self.basins.get(name)
        if existing is None:
            config = apply_basin_config(default_basin_config(), patch)
            return self.put_basin(name, config, self.clock.time()), "created"
        if existing.deleted_at is not None:
            raise conflict("basin_deletion_pending", f"basin {name!r} is being deleted")
        config = apply_basin_config(existing.config, patch)
        if config == existing.config:
            return existing, "noop"
        return self.put_basin(name, config, existing.created_at), "updated"

    def reconfigure_basin(self, name: str, patch: Any) -> Basin:
        """PATCH semantics."""
        b = self.basin(name)
        return self.put_basin(name, apply_basin_config(b.config, patch), b.created_at)

    def delete_basin(self, name: str) -> None:
        """Start deleting a basin and its streams (asking again while it is pending changes nothing)."""
        b = self.basins.get(name)
        if b is None:
            raise not_found("basin_not_found", f"basin {name!r} not found")
        if b.deleted_at is not None:
            return
        b.deleted_at = self.clock.time()
        for s in b.streams.values():
            self._mark_deleted(s, b.deleted_at)
        self._log({"op": "basin_del", "name": name})

    def finish_deletions(self) -> int:
        """Remove the basins and streams whose deletion has been pending ``DELETION_DELAY_S``; how many."""
        due = self.clock.time() - DELETION_DELAY_S
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

    def stream(
        self, basin: str, name: str, *, auto_create: str | None = None, header_config: Any = None
    ) -> Stream:
        """The stream, auto-created when the basin's ``create_stream_on_<auto_create>`` is set; else 404."""
        b = self.basin(basin)
        s = b.streams.get(name)
        if s is not None:
            if s.deleted_at is not None:
                raise conflict("stream_deletion_pending", f"stream {name!r} is being deleted")
            return s
        if auto_create is not None and b.config.get(f"create_stream_on_{auto_create}"):
            validate_stream_name(name)
            config = apply_stream_config(b.config["default_stream_config"], header_config)
            return self.put_stream(basin, name, config, self.clock.time())
        raise not_found("stream_not_found", f"stream {name!r} not found in basin {basin!r}")

    def put_stream(self, basin: str, name: str, config: Json, created_at: float) -> Stream:
        """Create (or reconfigure) a stream with a complete config."""
        b = self.basin(basin)
        s = b.streams.get(name)
        if s is None:
            s = Stream(basin, name, config, created_at)
            b.streams[name] = s
        else:
            s.config = config
        self._log({"op": "stream", "basin": basin, "name": name, "config": config, "created_at": created_at})
        return s

    def create_stream(self, basin: str, name: str, patch: Any, request_token: str | None = None) -> Stream:
        """POST semantics: 409 if it exists, unless this is a retry carrying the same request token."""
        b = self.basin(basin)
        validate_stream_name(name)
        existing = b.streams.get(name)
        if existing is not None:
            if existing.deleted_at is not None:
                raise conflict("stream_deletion_pending", f"stream {name!r} is being deleted")
            if request_token is not None and existing.request_token == request_token:
                return existing
            raise conflict("resource_already_exists", f"stream {name!r} already exists")
        config = apply_stream_config(b.config["default_stream_config"], patch)
        s = self.put_stream(basin, name, config, self.clock.time())
        s.request_token = request_token
        return s

    def ensure_stream(self, basin: str, name: str, patch: Any) -> tuple[Stream, str]:
        """PUT semantics: (stream, ``created|updated|noop``)."""
        b = self.basin(basin)
        validate_stream_name(name)
        s = b.streams.get(name)
        if s is None:
            config = apply_stream_config(b.config["default_stream_config"], patch)
            return self.put_stream(basin, name, config, self.clock.time()), "created"
        if s.deleted_at is not None:
            raise conflict("stream_deletion_pending", f"stream {name!r} is being deleted")
        config = apply_stream_config(s.config, patch)
        if config == s.config:
            return s, "noop"
        return self.put_stream(basin, name, config, s.created_at), "updated"

    def reconfigure_stream(self, basin: str, name: str, patch: Any) -> Stream:
        """PATCH semantics."""
        s = self.stream(basin, name)
        return self.put_stream(basin, name, apply_stream_config(s.config, patch), s.created_at)

    def delete_stream(self, basin: str, name: str) -> None:
        """Start deleting a stream; its sessions are woken and end (asking again while pending is a no-op)."""
        s = self.basin(basin).streams.get(name)
        if s is None:
            raise not_found("stream_not_found", f"stream {name!r} not found in basin {basin!r}")
        if s.deleted_at is not None:
            return
        self._mark_deleted(s, self.clock.time())
        self._log({"op": "stream_del", "basin": basin, "name": name})

    @staticmethod
    def _mark_deleted(s: Stream, when: float) -> None:
        s.deleted = True
        s.deleted_at = when
        s.notify()

    def iter_streams(self) -> Iterator[Stream]:
        """Every stream of every basin."""
        for b in self.basins.values():
            yield from b.streams.values()
