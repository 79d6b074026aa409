"""A route table: (method, path pattern) -> handler.

Patterns are ``/``-separated segments: a literal, a ``{name}`` capture of one segment, or a final ``*`` for
any number of remaining segments. Matching works on the raw path: it is split on ``/`` first and each segment
is percent-decoded afterwards, so an encoded ``%2F`` inside a stream name never acts as a separator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar
from urllib.parse import unquote

from s2_sink.lite._api_errors import ApiError, bad

__all__ = ["Match", "Router", "split_path"]

H = TypeVar("H")


def split_path(path: str) -> list[str]:
    """The percent-decoded segments of a path without its query; 400 ``bad_path`` on bad encoding."""
    try:
        return [unquote(s, errors="strict") for s in path.split("/")[1:]]
    except UnicodeDecodeError as exc:
        raise bad("bad_path", "path is not valid percent-encoded UTF-8") from exc


@dataclass(frozen=True, slots=True)
class Match(Generic[H]):
    """A matched route: its handler and the captured segments."""

    handler: H
    params: dict[str, str]


@dataclass(frozen=True, slots=True)
class _Route(Generic[H]):
    method: str
    segments: tuple[str, ...]
    handler: H

    def capture(self, parts: list[str]) -> dict[str, str] | None:
        segs = self.segments
        if segs and segs[-1] == "*":
            segs = segs[:-1]
            if len(parts) < len(segs):
                return None
        elif len(parts) != len(segs):
            return None
        params: dict[str, str] = {}
        for seg, part in zip(segs, parts, strict=False):
            if seg.startswith("{"):
                params[seg[1:-1]] = part
            elif seg != part:
                return None
        return params


class Router(Generic[H]):
    """Routes in the order added; the first (method, pattern) that matches wins (method ``*`` = any)."""

    def __init__(self) -> None:
        self._routes: list[_Route[H]] = []

    def add(self, method: str, pattern: str, handler: H) -> None:
        """Register ``handler`` for ``method`` on ``pattern``."""
        self._routes.append(_Route(method, tuple(pattern.split("/")[1:]), handler))

    def route(self, method: str, path: str) -> Match[H]:
        """The route for a request; 404 if no pattern matches, 405 if only the method differs."""
        parts = split_path(path)
        path_known = False
        for r in self._routes:
            params = r.capture(parts)
            if params is None:
                continue
            if r.method in ("*", method):
                return Match(r.handler, params)
            path_known = True
        if path_known:
            raise ApiError(405, "bad_path", f"method {method} not allowed on {path}")
        raise ApiError(404, "not_found", f"no route for {method} {path}")
