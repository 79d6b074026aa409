"""The application behind every connection: authentication, the route table and the records routes.

Unary routes (the control plane, unary appends and reads, fault hooks) run as tasks once the body is in;
sessions (S2S appends, S2S and SSE reads) take over the request as soon as its headers arrive.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from s2_sink.lite._api_errors import ApiError, bad
from s2_sink.lite._append_input import parse_input
from s2_sink.lite._appends import Appender, AppendSession, ConnectionDropped
from s2_sink.lite._clock import Clock
from s2_sink.lite._configs import Json, parse_json
from s2_sink.lite._control import ControlPlane, UnaryHandler
from s2_sink.lite._durability import DurableLog, encode_meta
from s2_sink.lite._faults import Faults, FaultsDisabledError
from s2_sink.lite._jsonfmt import ack_to_json, append_input_from_json, read_batch_to_json
from s2_sink.lite._names import validate_stream_name
from s2_sink.lite._payloads import (
    JSON,
    Response,
    basin_header,
    decoded_body,
    is_proto,
    json_body,
    json_response,
    s2_format,
    wants_proto,
)
from s2_sink.lite._read_out import S2SOut, SSEOut
from s2_sink.lite._read_params import ReadParams
from s2_sink.lite._reads import read_session, unary_read
from s2_sink.lite._request import Request
from s2_sink.lite._router import Router
from s2_sink.lite._stats import RequestStats, request_kind
from s2_sink.lite._store import Store
from s2_sink.lite._stream import Stream
from s2_sink.lite._throttle import Throttle

__all__ = ["LiteApp"]

log = logging.getLogger(__name__)

#: (request, path captures, query): responds itself, at once or later.
RouteHandler = Callable[[Request, dict[str, str], str], None]

_PROTO = [("content-type", "application/protobuf")]
_INTERNAL = b'{"code":"other","message":"internal server error"}'


def _names(req: Request, stream: str) -> tuple[str, str]:
    """(basin, stream) of a records route: the ``s2-basin`` header, then the stream's path segment."""
    basin = basin_header(req)
    validate_stream_name(stream, "bad_path")
    return basin, stream


class LiteApp:
    """The application behind every connection of one server."""

    def __init__(
        self,
        store: Store,
        log_: DurableLog | None,
        faults: Faults,
        token: str | None,
        *,
        clock: Clock | None = None,
        throttle: bool = False,
        stats: RequestStats | None = None,
    ) -> None:
        self.store = store
        self.stats = stats
        self.log = log_
        self.faults = faults
        self.token = token
        self.clock = clock or Clock()
        self.throttle = Throttle(self.clock) if throttle else None
        self.appender = Appender(log_, faults, self.clock, self.throttle, stats)
        self.tasks: set[asyncio.Task[None]] = set()
        if log_ is not None:
            store.on_meta = lambda doc: log_.write(encode_meta(doc))
        # A deletion's terminal trim record is committed like any append: live readers see it once durable.
        store.commit_terminal = lambda stream, batch: self.appender.commit(stream, batch, lambda: None)
        self.router: Router[RouteHandler] = Router()
        for method, pattern, handler in ControlPlane(store, self.durable).routes():
            self.router.add(method, pattern, self._unary_route(handler))
        self.router.add("POST", "/v1/streams/{stream}/records", self._append)
        self.router.add("GET", "/v1/streams/{stream}/records", self._read)
        self.router.add("*", "/_lite/faults", self._unary_route(self._faults))

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
        try:
            if self.token is not None and req.headers.get("authorization") != f"Bearer {self.token}":
                raise ApiError(401, "authn", "invalid or missing access token")
            match = self.router.route(req.method, path)
            if self.stats is not None:
                ctype, accept = req.headers.get("content-type", ""), req.headers.get("accept", "")
                kind = request_kind(req.method, path, ctype, accept)
                self.stats.request(kind, match.params.get("stream", ""))
            match.handler(req, match.params, query)
        except ApiError as exc:
            req.respond(exc.status, [*JSON, *exc.headers], exc.body())

    def _unary_route(self, handler: UnaryHandler) -> RouteHandler:
        def route(req: Request, params: dict[str, str], query: str) -> None:
            self._unary(req, lambda body: handler(req, params, query, body))

        return route

    def _unary(self, req: Request, handler: Callable[[bytes], Awaitable[Response]]) -> None:
        async def run() -> None:
            try:
                status, headers, body = await handler(bytes(req.body))
            except ApiError as exc:
                status, headers, body = exc.status, [*JSON, *exc.headers], exc.body()
            except ConnectionDropped:
                return
            except Exception:
                log.exception("handler failed for %s %s", req.method, req.path)
                status, headers, body = 500, JSON, _INTERNAL
            req.respond(status, headers, body)

        if req.ended:
            self.spawn(req, run())
        else:
            req.on_end = lambda: self.spawn(req, run())

    # -- records ---------------------------------------------------------------------------------------------

    def _stream_for(self, req: Request, name: str, auto: str) -> Stream:
        return self.store.stream(*_names(req, name), auto_create=auto)

    def _append(self, req: Request, params: dict[str, str], query: str) -> None:
        ctype = req.headers.get("content-type", "")
        if ctype.split(";")[0].strip().lower() == "s2s/proto":
            # The stream is opened before any input is read (S2: ``open_for_append``, then the session); an
            # auto-created stream's metadata entry precedes the session's appends in the log, so it is
            # durable before any of their acks.
            AppendSession(self.appender, req, self._stream_for(req, params["stream"], "append"))
            return
        names = _names(req, params["stream"])
        self._unary(req, lambda body: self._unary_append(req, names, ctype, body))

    def _read(self, req: Request, params: dict[str, str], query: str) -> None:
        names = _names(req, params["stream"])
        read = ReadParams.parse(query)
        if req.headers.get("content-type", "").split(";")[0].strip().lower() == "s2s/proto":
            stream = self.store.stream(*names, auto_create="read")
            out = S2SOut(req.headers.get("accept-encoding"))
            self.spawn(req, read_session(req, stream, read, out, stats=self.stats))
            return
        if req.headers.get("accept", "").split(",")[0].split(";")[0].strip() == "text/event-stream":
            last_event_id = req.headers.get("last-event-id")
            delivered = read.resume(last_event_id) if last_event_id else (0, 0)
            stream = self.store.stream(*names, auto_create="read")
            self.spawn(
                req, read_session(req, stream, read, SSEOut(s2_format(req)), delivered, stats=self.stats)
            )
            return
        stream = self.store.stream(*names, auto_create="read")
        self._unary(req, lambda body: self._unary_read(req, stream, read))

    async def _unary_append(self, req: Request, names: tuple[str, str], ctype: str, body: bytes) -> Response:
        # The input is decoded and checked before the stream is looked up (S2 extracts the request first):
        # a refused append never auto-creates its stream.
        if is_proto(ctype):
            payload = decoded_body(req, body)
        else:
            payload = append_input_from_json(json_body(req, body), s2_format(req))
        parsed = parse_input(payload)
        stream = self.store.stream(*names, auto_create="append")
        ack = await self.appender.unary(req, stream, payload, parsed)
        if wants_proto(req):
            return 200, _PROTO, ack
        return json_response(200, ack_to_json(ack))

    async def _unary_read(self, req: Request, stream: Stream, params: ReadParams) -> Response:
        batch = await unary_read(stream, params, self.stats)
        if wants_proto(req):
            return 200, _PROTO, batch
        return json_response(200, read_batch_to_json(batch, s2_format(req)))

    # -- faults ----------------------------------------------------------------------------------------------

    async def _faults(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
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
        return json_response(200, snapshot)
