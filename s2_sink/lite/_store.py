"""Basins and streams: the S2 control plane's state, in memory.

Everything here runs on the server's single event loop thread, so no locks. Stream data lives in
``_stream``; the durable log (``_durability``) replays into the same calls.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from s2_sink.lite._clock import rfc3339
from s2_sink.lite._configs import Json, apply_basin_config, apply_stream_config, default_basin_config
from s2_sink.lite._errors import conflict, invalid, not_found
from s2_sink.lite._stream import Stream

__all__ = ["Basin", "Store"]

_BASIN_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")


def validate_basin_name(name: str) -> None:
    """8-48 chars of ``[a-z0-9-]``, not starting or ending with a hyphen."""
    if not (8 <= len(name) <= 48 and _BASIN_RE.match(name)):
        raise invalid(
            f"basin name must be 8-48 characters of [a-z0-9-] not starting or ending with '-', got {name!r}"
        )


def validate_stream_name(name: str) -> None:
    """1-512 bytes of UTF-8 without NUL."""
    if not (1 <= len(name.encode()) <= 512) or "\x00" in name:
        raise invalid(f"stream name must be 1-512 bytes without NUL, got {name!r}")


@dataclass(eq=False)
class Basin:
    """A basin: configuration and streams."""

    name: str
    config: Json
    created_at: float
    request_token: str | None = None
    streams: dict[str, Stream] = field(default_factory=dict)

    def info(self) -> Json:
        """BasinInfo JSON."""
        return {
            "name": self.name,
            "location": None,
            "created_at": rfc3339(self.created_at),
            "deleted_at": None,
            "state": "active",
        }


class Store:
    """All basins. Mutations of metadata are reported to ``on_meta`` (the durable log) as JSON documents."""

    def __init__(self) -> None:
        self.basins: dict[str, Basin] = {}
        self.on_meta: Callable[[Json], None] | None = None

    def _log(self, doc: Json) -> None:
        if self.on_meta is not None:
            self.on_meta(doc)

    # -- basins ----------------------------------------------------------------------------------------------

    def basin(self, name: str) -> Basin:
        """The basin, or 404 ``basin_not_found``."""
        b = self.basins.get(name)
        if b is None:
            raise not_found("basin_not_found", f"basin {name!r} not found")
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
            if request_token is not None and existing.request_token == request_token:
                return existing, False
            raise conflict("resource_already_exists", f"basin {name!r} already exists")
        config = apply_basin_config(default_basin_config(), patch)
        return self.put_basin(name, config, time.time(), request_token), True

    def ensure_basin(self, name: str, patch: Any) -> tuple[Basin, str]:
        """PUT semantics: (basin, provision result ``created|updated|noop``)."""
        validate_basin_name(name)
        existing = self.basins.get(name)
        if existing is None:
            config = apply_basin_config(default_basin_config(), patch)
            return self.put_basin(name, config, time.time()), "created"
        config = apply_basin_config(existing.config, patch)
        if config == existing.config:
            return existing, "noop"
        return self.put_basin(name, config, existing.created_at), "updated"

    def reconfigure_basin(self, name: str, patch: Any) -> Basin:
        """PATCH semantics."""
        b = self.basin(name)
        return self.put_basin(name, apply_basin_config(b.config, patch), b.created_at)

    def delete_basin(self, name: str) -> None:
        """Delete a basin and its streams."""
        b = self.basin(name)
        del self.basins[name]
        for s in b.streams.values():
            s.deleted = True
            s.notify()
        self._log({"op": "basin_del", "name": name})

    # -- streams ---------------------------------------------------------------------------------------------

    def stream(
        self, basin: str, name: str, *, auto_create: str | None = None, header_config: Any = None
    ) -> Stream:
        """The stream, auto-created when the basin's ``create_stream_on_<auto_create>`` is set; else 404."""
        b = self.basin(basin)
        s = b.streams.get(name)
        if s is not None:
            return s
        if auto_create is not None and b.config.get(f"create_stream_on_{auto_create}"):
            validate_stream_name(name)
            config = apply_stream_config(b.config["default_stream_config"], header_config)
            return self.put_stream(basin, name, config, time.time())
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
            if request_token is not None and existing.request_token == request_token:
                return existing
            raise conflict("resource_already_exists", f"stream {name!r} already exists")
        config = apply_stream_config(b.config["default_stream_config"], patch)
        s = self.put_stream(basin, name, config, time.time())
        s.request_token = request_token
        return s

    def ensure_stream(self, basin: str, name: str, patch: Any) -> tuple[Stream, str]:
        """PUT semantics: (stream, ``created|updated|noop``)."""
        b = self.basin(basin)
        validate_stream_name(name)
        s = b.streams.get(name)
        if s is None:
            config = apply_stream_config(b.config["default_stream_config"], patch)
            return self.put_stream(basin, name, config, time.time()), "created"
        config = apply_stream_config(s.config, patch)
        if config == s.config:
            return s, "noop"
        return self.put_stream(basin, name, config, s.created_at), "updated"

    def reconfigure_stream(self, basin: str, name: str, patch: Any) -> Stream:
        """PATCH semantics."""
        s = self.stream(basin, name)
        return self.put_stream(basin, name, apply_stream_config(s.config, patch), s.created_at)

    def delete_stream(self, basin: str, name: str) -> None:
        """Delete a stream; readers following it are woken and see it gone."""
        s = self.stream(basin, name)
        del self.basin(basin).streams[name]
        s.deleted = True
        s.notify()
        self._log({"op": "stream_del", "basin": basin, "name": name})

    def iter_streams(self) -> Iterator[Stream]:
        """Every stream of every basin."""
        for b in self.basins.values():
            yield from b.streams.values()
