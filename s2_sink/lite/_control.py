"""The control plane: basins, streams and their configs, as unary JSON handlers.

Each handler takes the request, the captured path segments, the query string and the body, and returns a
``Response``. Changes are acknowledged only once the durable log (if any) has them on disk.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from s2_sink.lite._errors import ApiError, bad
from s2_sink.lite._payloads import (
    Response,
    basin_header,
    json_body,
    json_response,
    page,
    stream_config_header,
)
from s2_sink.lite._request import Request
from s2_sink.lite._store import Store

__all__ = ["ControlPlane", "UnaryHandler"]

#: (request, path captures, query, body) -> response.
UnaryHandler = Callable[[Request, dict[str, str], str, bytes], Awaitable[Response]]


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
        """GET /v1/basins."""
        basins = self.store.basins
        names, more = page(list(basins), query)
        return json_response(200, {"basins": [basins[n].info() for n in names], "has_more": more})

    async def create_basin(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """POST /v1/basins: 201, or 200 ``noop`` for a retried request token."""
        doc = json_body(req, body)
        if not isinstance(doc, dict) or not isinstance(doc.get("basin"), str):
            raise bad("bad_json", "create basin needs {'basin': name}")
        b, created = self.store.create_basin(
            doc["basin"], doc.get("config"), req.headers.get("s2-request-token")
        )
        await self.durable()
        result = "created" if created else "noop"
        return json_response(201 if created else 200, b.info(), [("s2-provision-result", result)])

    async def ensure_basin(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """PUT /v1/basins/{basin}: create or reconfigure."""
        doc = json_body(req, body)
        if doc is not None and not isinstance(doc, dict):
            raise bad("bad_json", "ensure basin body must be an object")
        b, result = self.store.ensure_basin(p["basin"], (doc or {}).get("config"))
        await self.durable()
        return json_response(201 if result == "created" else 200, b.info(), [("s2-provision-result", result)])

    async def get_basin_config(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """GET /v1/basins/{basin}."""
        return json_response(200, self.store.basin(p["basin"]).config)

    async def reconfigure_basin(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """PATCH /v1/basins/{basin}."""
        b = self.store.reconfigure_basin(p["basin"], json_body(req, body) or {})
        await self.durable()
        return json_response(200, b.config)

    async def delete_basin(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """DELETE /v1/basins/{basin}: 202."""
        self.store.delete_basin(p["basin"])
        await self.durable()
        return 202, [], b""

    # -- streams ---------------------------------------------------------------------------------------------

    async def list_streams(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """GET /v1/streams."""
        basin = self.store.basin(basin_header(req))
        names, more = page(list(basin.streams), query)
        return json_response(200, {"streams": [basin.streams[n].info() for n in names], "has_more": more})

    async def create_stream(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """POST /v1/streams: 201 (or the same answer for a retried request token)."""
        basin = self.store.basin(basin_header(req))
        doc = json_body(req, body)
        if not isinstance(doc, dict) or not isinstance(doc.get("stream"), str):
            raise bad("bad_json", "create stream needs {'stream': name}")
        s = self.store.create_stream(
            basin.name, doc["stream"], doc.get("config"), req.headers.get("s2-request-token")
        )
        await self.durable()
        return json_response(201, s.info())

    async def ensure_stream(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """PUT /v1/streams/{stream}: create or reconfigure."""
        s, result = self.store.ensure_stream(basin_header(req), p["stream"], json_body(req, body))
        await self.durable()
        return json_response(201 if result == "created" else 200, s.info(), [("s2-provision-result", result)])

    async def get_stream_config(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """GET /v1/streams/{stream}."""
        return json_response(200, self.store.stream(basin_header(req), p["stream"]).config)

    async def reconfigure_stream(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """PATCH /v1/streams/{stream}."""
        s = self.store.reconfigure_stream(basin_header(req), p["stream"], json_body(req, body) or {})
        await self.durable()
        return json_response(200, s.config)

    async def delete_stream(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """DELETE /v1/streams/{stream}: 202."""
        self.store.delete_stream(basin_header(req), p["stream"])
        await self.durable()
        return 202, [], b""

    async def check_tail(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """GET /v1/streams/{stream}/records/tail (auto-creates on read when the basin says so)."""
        s = self.store.stream(
            basin_header(req), p["stream"], auto_create="read", header_config=stream_config_header(req)
        )
        await self.durable()
        seq, ts = s.tail()
        return json_response(200, {"tail": {"seq_num": seq, "timestamp": ts}})

    async def not_implemented(self, req: Request, p: dict[str, str], query: str, body: bytes) -> Response:
        """Access tokens, metrics and locations: 501, like s2-lite."""
        resource = req.path.partition("?")[0].split("/")[2]
        raise ApiError(501, "not_implemented", f"/v1/{resource} is not implemented by the lite server")
