"""Reading request headers and bodies, and building JSON responses: the parts every route shares."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

import orjson

from s2_sink.lite._api_errors import bad
from s2_sink.lite._configs import parse_json
from s2_sink.lite._framing import COMPRESS_GZIP, COMPRESS_ZSTD, decompress
from s2_sink.lite._names import validate_basin_name, validate_stream_name
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


def _is_json(content_type: str) -> bool:
    """``application/json`` or ``application/*+json`` (the first type of the header; parameters ignored)."""
    mime = content_type.split(",", maxsplit=1)[0].split(";", maxsplit=1)[0].strip().lower()
    return mime == "application/json" or (mime.startswith("application/") and mime.endswith("+json"))


def json_body(req: Request, body: bytes, *, optional: bool = False) -> Any:
    """The parsed JSON body, as S2's extractors take it (``api/src/data.rs``): it must be sent as
    ``content-type: application/json`` (else 400 ``bad_json``). An `optional` body (ensure) may be left
    out: without a content-type, or empty, it is None. 400 ``bad_json`` on junk."""
    ctype = req.headers.get("content-type")
    if ctype is None and optional:
        return None
    if ctype is None or not _is_json(ctype):
        raise bad("bad_json", "Expected request with `Content-Type: application/json`")
    body = decoded_body(req, body)
    if not body and optional:
        return None
    return parse_json(body)


def basin_header(req: Request) -> str:
    """The ``s2-basin`` header that names the basin of a stream request; 400 ``bad_header`` if missing or
    not a basin name."""
    name = req.headers.get("s2-basin")
    if name is None:
        raise bad("bad_header", "Missing header `s2-basin`")
    validate_basin_name(name, "bad_header")
    return name


def wants_proto(req: Request) -> bool:
    """The client asked for a protobuf answer."""
    accept = req.headers.get("accept", "")
    return is_proto(accept.split(",")[0])


def is_proto(content_type: str) -> bool:
    """The body is a protobuf message."""
    return content_type.split(";", maxsplit=1)[0].strip().lower() in PROTO_TYPES


def s2_format(req: Request) -> str:
    """How record bytes are written in JSON (``s2-format``: ``raw`` or ``json``, ``base64`` or
    ``json-binsafe``); 400 ``bad_header`` otherwise."""
    fmt = req.headers.get("s2-format", "raw").strip()
    if fmt in ("raw", "json"):
        return "raw"
    if fmt in ("base64", "json-binsafe"):
        return "base64"
    raise bad("bad_header", f"Invalid header `s2-format`: {fmt}")


def page(names: list[str], query: str, kind: str) -> tuple[list[str], bool]:
    """Filter and paginate names by ``prefix``, ``start_after`` and ``limit`` as S2 lists them
    (``list_streams``, ``list_basins``): names after ``start_after`` that start with ``prefix``, in byte
    order; a ``limit`` of 0 or over 1000 is 1000; a ``start_after`` before the prefix starts at the prefix."""
    q = dict(parse_qsl(query, keep_blank_values=True))
    prefix = q.get("prefix", "")
    start_after = q.get("start_after", "")
    check = validate_basin_name if kind == "basin" else validate_stream_name
    check(prefix, "bad_query", prefix=True)
    check(start_after, "bad_query", prefix=True)
    try:
        limit = int(q.get("limit", "1000"))
    except ValueError as exc:
        raise bad("bad_query", f"limit must be a non-negative integer, got {q.get('limit')!r}") from exc
    if limit < 0:
        raise bad("bad_query", f"limit must be a non-negative integer, got {limit}")
    if not 0 < limit <= 1000:
        limit = 1000
    after = start_after.encode()
    matches = sorted((n for n in names if n.startswith(prefix) and n.encode() > after), key=str.encode)
    return matches[:limit], len(matches) > limit
