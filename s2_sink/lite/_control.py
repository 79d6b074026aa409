"""The control plane: basins, streams and their configs, as unary JSON handlers.

Each handler takes the request, the captured path segments, the query string and the body, and returns a
``Response``. Changes are acknowledged only once the durable log (if any) has them on disk.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from s2_sink.lite._api_errors import ApiError, bad
from s2_sink.lite._configs import basin_config_json
from s2_sink.lite._names import validate_basin_name, validate_stream_name
from s2_sink.lite._payloads import Response, basin_header, json_body, json_response, page
from s2_sink.lite._request import Request
from s2_sink.lite._store import Store

__all__ = ["ControlPlane", "UnaryHandler"]

#: (request, path captures, query, body) -> response.
UnaryHandler = Callable[[Request, dict[str, str], str, bytes], Awaitable[Response]]

_MAX_REQUEST_TOKEN = 36


def _request_token(req: Request) -> str | None:
    """The ``s2-request-token`` header (a create's idempotency token): at most 36 bytes."""
    token = req.headers.get("s2-request-token")
    if token is not None and len(token.encode()) > _MAX_REQUEST_TOKEN:
        raise bad(
            "bad_header",
            f"Invalid header `s2-request-token`: request token was longer than {_MAX_REQUEST_TOKEN} bytes "
            f"in length: {len(token.encode())}",
        )
    return token


def _named(doc: Any, key: str, what: str) -> str:
    if not isinstance(doc, dict) or not isinstance(doc.get(key), str):
        raise bad("bad_json", f"{what} needs {{{key!r}: name}}")
    return str(doc[key])


def _path_basin(p: dict[str, str]) -> str:
    validate_basin_name(p["basin"], "bad_path")
    return p["basin"]


def _path_stream(req: Request, p: dict[str, str]) -> tuple[str, str]:
    """(basin, stream) of a stream route: the ``s2-basin`` header first, then the path (S2's order)."""
    basin = basin_header(req)
    validate_stream_name(p["stream"], "bad_path")
    return basin, p["stream"]


class ControlPlane:
    """Handlers of the basin and stream routes."""

    def __init__(self, store: Store, durable: Callable[[], Awaitable[None]]) -> None:
        self.store = store
        self.durable = durable

    def routes(self) -> list[tuple[str, str, UnaryHandler]]:
        """(method, pattern, handler) of every control-plane route."""
        return [
            ("GET", "/v1/basins", self.list_basins),
            ("POST", "/v1/basins", self.create_basin),
            ("PUT", "/v1/basins/{basin}", self.ensure_basin),
            ("GET", "/v1/basins/{basin}", self.get_basin_config),
            ("PATCH", "/v1/basins/{basin}", self.reconfigure_basin),
            ("DELETE", "/v1/basins/{basin}", self.delete_basin),
            ("GET", "/v1/streams", self.list_streams),
            ("POST", "/v1/streams", self.create_stream),
            ("PUT", "/v1/streams/{stream}", self.ensure_stream),
            ("GET", "/v1/streams/{stream}", self.get_stream_config),
            ("PATCH", "/v1/streams/{stream}", self.reconfigure_stream),
            ("DELETE", "/v1/streams/{stream}", self.delete_stream),
            ("GET", "/v1/streams/{stream}/records/tail", self.check_tail),
            ("*", "/v1/access-tokens/*", self.not_implemented),
            ("*", "/v1/metrics/*", self.not_implemented),
            ("*", "/v1/locations/*", self.not_implemented),
        ]

    # -- basins ----------------------------------------------------------------------------------------------

    async def list_basins(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """GET /v1/basins (deleting basins included, with ``deleted_at``)."""
        basins = self.store.basins
        names, more = page(list(basins), query, "basin")
        return json_response(200, {"basins": [basins[n].info() for n in names], "has_more": more})

    async def create_basin(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """POST /v1/basins: 201, with ``s2-provision-result: created``, or ``noop`` for a retried request."""
        token = _request_token(req)
        doc = json_body(req, body)
        name = _named(doc, "basin", "create basin")
        validate_basin_name(name, "bad_json")
        b, created = self.store.create_basin(name, doc.get("config"), token)
        await self.durable()
        return json_response(201, b.info(), [("s2-provision-result", "created" if created else "noop")])

    async def ensure_basin(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """PUT /v1/basins/{basin}: create it, or set its config to the one given (none: the defaults)."""
        name = _path_basin(p)
        doc = json_body(req, body, optional=True)
        if doc is not None and not isinstance(doc, dict):
            raise bad("bad_json", "ensure basin body must be an object")
        b, result = self.store.ensure_basin(name, (doc or {}).get("config"))
        await self.durable()
        return json_response(201 if result == "created" else 200, b.info(), [("s2-provision-result", result)])

    async def get_basin_config(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """GET /v1/basins/{basin} (also while its deletion is pending)."""
        return json_response(200, basin_config_json(self.store.basin_config(_path_basin(p))))

    async def reconfigure_basin(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """PATCH /v1/basins/{basin}."""
        name = _path_basin(p)
        b = self.store.reconfigure_basin(name, json_body(req, body))
        await self.durable()
        return json_response(200, basin_config_json(b.config))

    async def delete_basin(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """DELETE /v1/basins/{basin}: 202."""
        self.store.delete_basin(_path_basin(p))
        await self.durable()
        return 202, [], b""

    # -- streams ---------------------------------------------------------------------------------------------

    async def list_streams(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """GET /v1/streams (deleting streams included, with ``deleted_at``; a missing basin has none)."""
        streams = self.store.streams_of(basin_header(req))
        names, more = page(list(streams), query, "stream")
        return json_response(200, {"streams": [streams[n].info() for n in names], "has_more": more})

    async def create_stream(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """POST /v1/streams: 201, with ``s2-provision-result: created``, or ``noop`` for a retried request."""
        token = _request_token(req)
        basin = basin_header(req)
        doc = json_body(req, body)
        name = _named(doc, "stream", "create stream")
        validate_stream_name(name, "bad_json")
        s, created = self.store.create_stream(basin, name, doc.get("config"), token)
        await self.durable()
        return json_response(201, s.info(), [("s2-provision-result", "created" if created else "noop")])

    async def ensure_stream(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """PUT /v1/streams/{stream}: create it, or set its config to the one given merged with the basin's
        defaults (fields not given are reset)."""
        basin, name = _path_stream(req, p)
        s, result = self.store.ensure_stream(basin, name, json_body(req, body, optional=True))
        await self.durable()
        return json_response(201 if result == "created" else 200, s.info(), [("s2-provision-result", result)])

    async def get_stream_config(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """GET /v1/streams/{stream}."""
        return json_response(200, self.store.stream_config(*_path_stream(req, p)))

    async def reconfigure_stream(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """PATCH /v1/streams/{stream}."""
        basin, name = _path_stream(req, p)
        s = self.store.reconfigure_stream(basin, name, json_body(req, body))
        await self.durable()
        return json_response(200, s.config)

    async def delete_stream(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """DELETE /v1/streams/{stream}: 202."""
        self.store.delete_stream(*_path_stream(req, p))
        await self.durable()
        return 202, [], b""

    async def check_tail(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """GET /v1/streams/{stream}/records/tail (auto-creates on read when the basin says so)."""
        s = self.store.stream(*_path_stream(req, p), auto_create="read")
        await self.durable()
        seq, ts = s.tail()
        return json_response(200, {"tail": {"seq_num": seq, "timestamp": ts}})

    async def not_implemented(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """Access tokens, metrics and locations: 501, like s2-lite."""
        raise ApiError(501, "not_implemented", "Not implemented")
