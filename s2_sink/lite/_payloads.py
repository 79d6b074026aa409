"""Reading request headers and bodies, and building JSON responses: the parts every route shares."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

import orjson

from s2_sink.lite._configs import parse_json
from s2_sink.lite._errors import bad, invalid
from s2_sink.lite._framing import COMPRESS_GZIP, COMPRESS_ZSTD, decompress
from s2_sink.lite._request import Request

__all__ = [
    "JSON",
    "Response",
    "basin_header",
    "decoded_body",
    "is_proto",
    "json_body",
    "json_response",
    "page",
    "s2_format",
    "stream_config_header",
    "wants_proto",
]

JSON = [("content-type", "application/json")]
PROTO_TYPES = ("application/protobuf", "application/x-protobuf")

#: (status, headers, body) of a unary answer.
Response = tuple[int, list[tuple[str, str]], bytes]


def json_response(status: int, doc: Any, headers: Iterable[tuple[str, str]] = ()) -> Response:
    """A JSON answer."""
    return status, [*JSON, *headers], orjson.dumps(doc)


def decoded_body(req: Request, body: bytes) -> bytes:
    """The body with its ``content-encoding`` (zstd or gzip) undone."""
    enc = req.headers.get("content-encoding")
    if enc and body:
        return decompress(body, COMPRESS_ZSTD if enc == "zstd" else COMPRESS_GZIP)
    return body


def json_body(req: Request, body: bytes) -> Any:
    """The parsed JSON body (None when empty); 400 ``bad_json`` on junk."""
    if not body:
        return None
    return parse_json(decoded_body(req, body))


def basin_header(req: Request) -> str:
    """The ``s2-basin`` header that names the basin of a stream request; 400 if missing."""
    name = req.headers.get("s2-basin")
    if not name:
        raise bad("bad_header", "the s2-basin header is required for stream requests")
    return name


def stream_config_header(req: Request) -> Any:
    """The ``s2-stream-config`` header (config for a stream auto-created by this request), parsed."""
    raw = req.headers.get("s2-stream-config")
    return parse_json(raw.encode()) if raw else None


def wants_proto(req: Request) -> bool:
    """The client asked for a protobuf answer."""
    accept = req.headers.get("accept", "")
    return accept.split(",")[0].split(";")[0].strip() in PROTO_TYPES


def is_proto(content_type: str) -> bool:
    """The body is a protobuf message."""
    return content_type.split(";", maxsplit=1)[0].strip() in PROTO_TYPES


def s2_format(req: Request) -> str:
    """How record bytes are written in JSON (``s2-format``: raw or base64)."""
    fmt = req.headers.get("s2-format", "raw")
    if fmt not in ("raw", "base64"):
        raise bad("bad_header", f"s2-format must be raw or base64, got {fmt!r}")
    return fmt


def page(names: list[str], query: str) -> tuple[list[str], bool]:
    """Filter and paginate sorted names by ``prefix``, ``start_after`` and ``limit`` (max 1000)."""
    q = dict(parse_qsl(query, keep_blank_values=True))
    prefix = q.get("prefix", "")
    start_after = q.get("start_after", "")
    try:
        limit = int(q.get("limit", "1000"))
    except ValueError as exc:
        raise bad("bad_query", f"limit must be an integer, got {q.get('limit')!r}") from exc
    if limit < 0:
        raise bad("bad_query", f"limit must be non-negative, got {limit}")
    limit = min(limit or 1000, 1000)
    if start_after and prefix and start_after < prefix:
        raise invalid(f"start_after {start_after!r} must not sort before prefix {prefix!r}")
    matches = [n for n in sorted(names) if n.startswith(prefix) and n > start_after]
    return matches[:limit], len(matches) > limit
