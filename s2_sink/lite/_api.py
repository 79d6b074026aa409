"""Request routing and the control plane (basins, streams, configs), plus health and fault endpoints.

Routing works on the raw ``:path``: it is split on ``/`` first and each segment is percent-decoded afterwards,
so an encoded ``%2F`` inside a stream name never acts as a separator.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl, unquote

import orjson

from s2_sink.lite._configs import Json, parse_json
from s2_sink.lite._durability import DurableLog, encode_meta
from s2_sink.lite._errors import ApiError, bad, invalid
from s2_sink.lite._faults import Faults, FaultsDisabledError
from s2_sink.lite._framing import COMPRESS_GZIP, COMPRESS_ZSTD, decompress
from s2_sink.lite._http2 import Request
from s2_sink.lite._jsonfmt import ack_to_json, append_input_from_json, read_batch_to_json
from s2_sink.lite._read_out import S2SOut, SSEOut
from s2_sink.lite._records import (
    AppendSession,
    ConnectionDropped,
    ReadParams,
    read_session,
    unary_append,
    unary_read,
)
from s2_sink.lite._store import Store
from s2_sink.lite._stream import Stream

__all__ = ["LiteApp"]

log = logging.getLogger(__name__)

_JSON = [("content-type", "application/json")]
_PROTO_TYPES = ("application/protobuf", "application/x-protobuf")

Response = tuple[int, list[tuple[str, str]], bytes]


def _json(status: int, doc: Any, headers: Iterable[tuple[str, str]] = ()) -> Response:
    return status, [*_JSON, *headers], orjson.dumps(doc)


def _page(names: list[str], query: str) -> tuple[list[str], bool]:
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


class LiteApp:
    """The application behind every connection of one server."""

    def __init__(self, store: Store, log_: DurableLog | None, faults: Faults, token: str | None) -> None:
        self.store = store
        self.log = log_
        self.faults = faults
        self.token = token
        self.tasks: set[asyncio.Task[None]] = set()
        if log_ is not None:
            store.on_meta = lambda doc: log_.write(encode_meta(doc))

    # -- plumbing --------------------------------------------------------------------------------------------

    def spawn(self, req: Request, coro: Awaitable[None]) -> None:
        """Run a request handler as a task, cancelled if the client resets the stream or on shutdown."""
        task = asyncio.ensure_future(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

        def cancel() -> None:
            task.cancel()

        req.on_reset = cancel

    async def durable(self) -> None:
        """Wait until metadata changes so far are on disk (no wait, and no fsync, if nothing is pending)."""
        if self.log is not None and not self.log.clean:
            await self.log.barrier()

    def on_request(self, req: Request) -> None:
        """Route one request."""
        path, _, query = req.path.partition("?")
        if path in ("/ping", "/health"):
            req.respond(200, [("content-type", "text/plain")], b"OK")
            return
        if self.token is not None and req.headers.get("authorization") != f"Bearer {self.token}":
            self._error(req, ApiError(401, "authn", "invalid or missing access token"))
            return
        try:
            parts = [unquote(s, errors="strict") for s in path.split("/")[1:]]
        except UnicodeDecodeError:
            self._error(req, bad("bad_path", "path is not valid percent-encoded UTF-8"))
            return
        if parts[:1] == ["_lite"] and parts[1:] == ["faults"]:
            self._unary(req, lambda body: self._faults(req, body))
            return
        if not parts or parts[0] != "v1":
            self._error(req, ApiError(404, "not_found", f"no route for {path}"))
            return
        rest = parts[1:]
        if len(rest) == 3 and rest[0] == "streams" and rest[2] == "records":
            self._records(req, rest[1], query)
            return
        self._unary(req, lambda body: self._control(req, rest, query, body))

    def _error(self, req: Request, exc: ApiError) -> None:
        req.respond(exc.status, _JSON, exc.body())

    def _unary(self, req: Request, handler: Callable[[bytes], Awaitable[Response]]) -> None:
        async def run() -> None:
            try:
                status, headers, body = await handler(bytes(req.body))
            except ApiError as exc:
                status, headers, body = exc.status, _JSON, exc.body()
            except ConnectionDropped:
                return
            except Exception:
                log.exception("handler failed for %s %s", req.method, req.path)
                status, headers, body = 500, _JSON, b'{"code":"other","message":"internal server error"}'
            req.respond(status, headers, body)

        if req.ended:
            self.spawn(req, run())
        else:
            req.on_end = lambda: self.spawn(req, run())

    def _body_json(self, req: Request, body: bytes) -> Any:
        if not body:
            return None
        enc = req.headers.get("content-encoding")
        if enc:
            body = decompress(body, COMPRESS_ZSTD if enc == "zstd" else COMPRESS_GZIP)
        return parse_json(body)

    def _basin_header(self, req: Request) -> str:
        name = req.headers.get("s2-basin")
        if not name:
            raise bad("bad_header", "the s2-basin header is required for stream requests")
        return name

    # -- control plane ---------------------------------------------------------------------------------------

    async def _control(self, req: Request, rest: list[str], query: str, body: bytes) -> Response:
        store = self.store
        m = req.method
        if rest == ["basins"]:
            if m == "GET":
                names, more = _page(list(store.basins), query)
                return _json(200, {"basins": [store.basins[n].info() for n in names], "has_more": more})
            if m == "POST":
                doc = self._body_json(req, body)
                if not isinstance(doc, dict) or not isinstance(doc.get("basin"), str):
                    raise bad("bad_json", "create basin needs {'basin': name}")
                b, created = store.create_basin(
                    doc["basin"], doc.get("config"), req.headers.get("s2-request-token")
                )
                await self.durable()
                return _json(
                    201 if created else 200,
                    b.info(),
                    [("s2-provision-result", "created" if created else "noop")],
                )
        elif len(rest) == 2 and rest[0] == "basins":
            name = rest[1]
            if m == "PUT":
                doc = self._body_json(req, body)
                if doc is not None and not isinstance(doc, dict):
                    raise bad("bad_json", "ensure basin body must be an object")
                b, result = store.ensure_basin(name, (doc or {}).get("config"))
                await self.durable()
                return _json(201 if result == "created" else 200, b.info(), [("s2-provision-result", result)])
            if m == "GET":
                return _json(200, store.basin(name).config)
            if m == "PATCH":
                b = store.reconfigure_basin(name, self._body_json(req, body) or {})
                await self.durable()
                return _json(200, b.config)
            if m == "DELETE":
                store.delete_basin(name)
                await self.durable()
                return 202, [], b""
        elif rest == ["streams"]:
            basin = store.basin(self._basin_header(req))
            if m == "GET":
                names, more = _page(list(basin.streams), query)
                return _json(200, {"streams": [basin.streams[n].info() for n in names], "has_more": more})
            if m == "POST":
                doc = self._body_json(req, body)
                if not isinstance(doc, dict) or not isinstance(doc.get("stream"), str):
                    raise bad("bad_json", "create stream needs {'stream': name}")
                s = store.create_stream(
                    basin.name, doc["stream"], doc.get("config"), req.headers.get("s2-request-token")
                )
                await self.durable()
                return _json(201, s.info())
        elif len(rest) == 2 and rest[0] == "streams":
            basin_name = self._basin_header(req)
            name = rest[1]
            if m == "PUT":
                s, result = store.ensure_stream(basin_name, name, self._body_json(req, body))
                await self.durable()
                return _json(201 if result == "created" else 200, s.info(), [("s2-provision-result", result)])
            if m == "GET":
                return _json(200, store.stream(basin_name, name).config)
            if m == "PATCH":
                s = store.reconfigure_stream(basin_name, name, self._body_json(req, body) or {})
                await self.durable()
                return _json(200, s.config)
            if m == "DELETE":
                store.delete_stream(basin_name, name)
                await self.durable()
                return 202, [], b""
        elif len(rest) == 4 and rest[0] == "streams" and rest[2:] == ["records", "tail"] and m == "GET":
            s = store.stream(
                self._basin_header(req), rest[1], auto_create="read", header_config=self._cfg_hdr(req)
            )
            await self.durable()
            seq, ts = s.tail()
            return _json(200, {"tail": {"seq_num": seq, "timestamp": ts}})
        elif rest[:1] in (["access-tokens"], ["metrics"], ["locations"]):
            raise ApiError(501, "not_implemented", f"/v1/{rest[0]} is not implemented by the lite server")
        raise ApiError(404, "not_found", f"no route for {req.method} {req.path.partition('?')[0]}")

    def _cfg_hdr(self, req: Request) -> Any:
        raw = req.headers.get("s2-stream-config")
        return parse_json(raw.encode()) if raw else None

    # -- records ---------------------------------------------------------------------------------------------

    def _stream_for(self, req: Request, name: str, auto: str) -> Stream:
        return self.store.stream(
            self._basin_header(req), name, auto_create=auto, header_config=self._cfg_hdr(req)
        )

    def _records(self, req: Request, name: str, query: str) -> None:
        ctype = req.headers.get("content-type", "")
        s2s = ctype == "s2s/proto"
        try:
            if req.method == "POST":
                stream = self._stream_for(req, name, "append")
                if s2s:
                    # An auto-created stream's metadata entry precedes the session's appends in the log, so
                    # it is durable before any of their acks.
                    AppendSession(self, req, stream)
                    return
                self._unary(req, lambda body: self._unary_append(req, stream, ctype, body))
                return
            if req.method == "GET":
                params = ReadParams.parse(query)
                stream = self._stream_for(req, name, "read")
                if s2s:
                    self.spawn(
                        req, read_session(req, stream, params, S2SOut(req.headers.get("accept-encoding")))
                    )
                    return
                if req.headers.get("accept", "").split(",")[0].strip() == "text/event-stream":
                    self.spawn(req, read_session(req, stream, params, SSEOut(self._fmt(req))))
                    return
                self._unary(req, lambda body: self._unary_read(req, stream, params))
                return
            raise ApiError(405, "bad_path", f"method {req.method} not allowed on records")
        except ApiError as exc:
            self._error(req, exc)

    async def _unary_append(self, req: Request, stream: Stream, ctype: str, body: bytes) -> Response:
        enc = req.headers.get("content-encoding")
        if enc:
            body = decompress(body, COMPRESS_ZSTD if enc == "zstd" else COMPRESS_GZIP)
        proto = ctype.split(";", maxsplit=1)[0].strip() in _PROTO_TYPES
        payload = body if proto else append_input_from_json(parse_json(body), self._fmt(req))
        ack = await unary_append(self, req, stream, payload)
        if self._wants_proto(req):
            return 200, [("content-type", "application/protobuf")], ack
        return _json(200, ack_to_json(ack))

    async def _unary_read(self, req: Request, stream: Stream, params: ReadParams) -> Response:
        batch = await unary_read(stream, params)
        if self._wants_proto(req):
            return 200, [("content-type", "application/protobuf")], batch
        return _json(200, read_batch_to_json(batch, self._fmt(req)))

    @staticmethod
    def _wants_proto(req: Request) -> bool:
        accept = req.headers.get("accept", "")
        return accept.split(",")[0].split(";")[0].strip() in _PROTO_TYPES

    @staticmethod
    def _fmt(req: Request) -> str:
        fmt = req.headers.get("s2-format", "raw")
        if fmt not in ("raw", "base64"):
            raise bad("bad_header", f"s2-format must be raw or base64, got {fmt!r}")
        return fmt

    # -- faults ----------------------------------------------------------------------------------------------

    async def _faults(self, req: Request, body: bytes) -> Response:
        if not self.faults.enabled:
            raise ApiError(
                403, "permission_denied", "fault hooks are off: start the server with --allow-faults"
            )
        if req.method == "POST":
            doc = parse_json(body) if body else {}
            if not isinstance(doc, dict):
                raise bad("bad_json", "faults body must be an object")
            try:
                self.faults.configure(doc)
            except (FaultsDisabledError, KeyError, TypeError, ValueError) as exc:
                raise bad("bad_json", f"bad faults document: {exc}") from exc
        elif req.method != "GET":
            raise ApiError(405, "bad_path", "use GET or POST on /_lite/faults")
        snapshot: Json = self.faults.snapshot()
        return _json(200, snapshot)
