"""Test helpers shared by the project's tests and by users' own."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

__all__ = ["fresh_basin", "unique_basin_name"]


def unique_basin_name(prefix: str = "t") -> str:
    """A basin name no other test uses: ``<prefix>-<16 hex chars>``."""
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def fresh_basin(
    endpoint: str,
    name: str | None = None,
    *,
    create_stream_on_append: bool = True,
    create_stream_on_read: bool = False,
    default_stream_config: dict[str, Any] | None = None,
    token: str = "test",
) -> str:
    """Create (ensure) a basin on the server at ``endpoint`` and return its name; synchronous, loop-free."""
    name = name or unique_basin_name()
    config: dict[str, Any] = {
        "create_stream_on_append": create_stream_on_append,
        "create_stream_on_read": create_stream_on_read,
    }
    if default_stream_config is not None:
        config["default_stream_config"] = default_stream_config
    # A plain-HTTP endpoint (a lite server) needs no TLS context (building one parses the whole CA bundle).
    tls = endpoint.lower().startswith("https:")
    with httpx.Client(http1=False, http2=True, timeout=10.0, verify=tls) as client:
        resp = client.put(
            f"{endpoint}/v1/basins/{name}",
            json={"config": config},
            headers={"authorization": f"Bearer {token}"},
        )
    resp.raise_for_status()
    return name
