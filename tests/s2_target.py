"""Which S2 the suite runs against: the project's lite server (the default), or one the environment names.

``make test-s2`` sets nothing itself: it runs the suite's S2-facing tests with these variables as they are.

    S2_SINK_TEST_BASIN_PREFIX   switches the suite to an existing S2; the run creates its basins there as
                                <prefix>-<run>-<hex> and deletes them (a token may be scoped to the prefix)
    S2_ACCESS_TOKEN             that S2's token (required with the prefix)
    S2_ACCOUNT_ENDPOINT         its account endpoint, default the S2 cloud's (https://a.s2.dev)
    S2_BASIN_ENDPOINT           its basin endpoint, default the S2 cloud's (https://{basin}.b.s2.dev)

The official s2-lite (``s2 lite --port 8080``) takes ``http://localhost:8080`` for both endpoints and any
token, like our lite server. Against another S2 the ``lite`` fixture is an `ExternalS2`: it has the endpoints
and the token, and anything only our lite server has (fault hooks, its clock, its process) skips the test,
naming it.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from s2_sdk import S2, Endpoints

from s2_sink.config import CLOUD_ACCOUNT_ENDPOINT, CLOUD_BASIN_ENDPOINT

__all__ = ["PREFIX_VAR", "ExternalS2", "basin_name", "endpoints", "external_s2", "sdk_client", "token"]

PREFIX_VAR = "S2_SINK_TEST_BASIN_PREFIX"
LITE_TOKEN = "test"  # our lite server takes any token
RUN = uuid.uuid4().hex[
    :6
]  # this run's basins: two runs against one S2 neither collide nor clean up each other


@dataclass(frozen=True)
class ExternalS2:
    """An S2 the suite did not start: the cloud, or an official s2-lite someone runs."""

    account_endpoint: str
    basin_endpoint: str
    token: str
    basin_prefix: str

    @property
    def endpoint(self) -> str:
        """The one endpoint of a server that serves both (an s2-lite); tests that address S2 by one URL skip
        against S2 with a basin endpoint of its own (the cloud)."""
        if self.account_endpoint != self.basin_endpoint:
            pytest.skip(
                f"addresses S2 by one endpoint; {self.account_endpoint} has a separate basin endpoint"
            )
        return self.account_endpoint

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # introspection (copy, pickle, pytest) must see a plain missing attribute
            raise AttributeError(name)
        # Fault hooks, the clock, the store, kill/restart: only the project's lite server has them.
        pytest.skip(f"needs the project's lite server (lite.{name}); not in {self.account_endpoint}")

    @property
    def run_prefix(self) -> str:
        return f"{self.basin_prefix}-{RUN}-"

    def unique_basin(self) -> str:
        return f"{self.run_prefix}{uuid.uuid4().hex[:12]}"

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.token}"}

    def create_basin(self, name: str, config: dict[str, Any]) -> None:
        with httpx.Client(http2=True, timeout=30.0) as client:
            resp = client.post(
                f"{self.account_endpoint}/v1/basins",
                json={"basin": name, "config": config},
                headers={**self._headers(), "s2-request-token": uuid.uuid4().hex},
            )
        resp.raise_for_status()

    def delete_basin(self, name: str) -> None:
        with httpx.Client(http2=True, timeout=30.0) as client:
            resp = client.delete(f"{self.account_endpoint}/v1/basins/{name}", headers=self._headers())
        if resp.status_code not in (202, 404):
            resp.raise_for_status()

    def delete_this_runs_basins(self) -> list[str]:
        """Delete every basin this run created (tests that make their own too); returns their names."""
        names: list[str] = []
        with httpx.Client(http2=True, timeout=30.0) as client:
            after = ""
            while True:
                resp = client.get(
                    f"{self.account_endpoint}/v1/basins",
                    params={"prefix": self.run_prefix, "start_after": after},
                    headers=self._headers(),
                )
                resp.raise_for_status()
                page = resp.json()
                names += [b["name"] for b in page["basins"] if not b.get("deleted_at")]
                if not page.get("has_more") or not page["basins"]:
                    break
                after = page["basins"][-1]["name"]
        for name in names:
            self.delete_basin(name)
        return names


def external_s2() -> ExternalS2 | None:
    """The S2 the environment names, or None to run against the project's lite server."""
    prefix = os.environ.get(PREFIX_VAR, "")
    if not prefix:
        return None
    token = os.environ.get("S2_ACCESS_TOKEN", "")
    if not token:
        raise pytest.UsageError(f"{PREFIX_VAR} is set: set S2_ACCESS_TOKEN to the token of that S2 as well")
    return ExternalS2(
        account_endpoint=os.environ.get("S2_ACCOUNT_ENDPOINT") or CLOUD_ACCOUNT_ENDPOINT,
        basin_endpoint=os.environ.get("S2_BASIN_ENDPOINT") or CLOUD_BASIN_ENDPOINT,
        token=token,
        basin_prefix=prefix,
    )


def basin_name() -> str:
    """A new basin name for a test that creates its own basin: in this run's prefix against another S2 (so
    the run deletes it at its end), else the lite server's usual ``t-<hex>``."""
    target = external_s2()
    return target.unique_basin() if target is not None else f"t-{uuid.uuid4().hex[:16]}"


def endpoints(srv: Any) -> tuple[str, str]:
    """(account, basin) endpoints of the `lite` fixture's server, ours or an external one."""
    if isinstance(srv, ExternalS2):
        return srv.account_endpoint, srv.basin_endpoint
    return str(srv.endpoint), str(srv.endpoint)


def token(srv: Any = None) -> str:
    """The token for the `lite` fixture's server (by default, for the S2 the suite runs against)."""
    if srv is None:
        target = external_s2()
        return target.token if target is not None else LITE_TOKEN
    return srv.token if isinstance(srv, ExternalS2) else LITE_TOKEN


def sdk_client(srv: Any, **kw: Any) -> S2:
    """An official SDK client for the `lite` fixture's server."""
    account, basin = endpoints(srv)
    return S2(token(srv), endpoints=Endpoints(account=account, basin=basin), **kw)
