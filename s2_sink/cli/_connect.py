"""Configuration and the SDK client for one command: the library's `S2Config` and client factory."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from s2_sdk import S2, S2Basin, S2Error

from s2_sink._transport.runtime import make_client
from s2_sink._transport.sdk import TransportError
from s2_sink.cli._failures import USAGE, CliFailure, explain
from s2_sink.config import S2Config
from s2_sink.errors import ConfigError

__all__ = ["add_connection_flags", "config_from", "open_basin", "run_io"]

T = TypeVar("T")


def add_connection_flags(parser: argparse.ArgumentParser) -> None:
    """``--basin`` and ``--endpoint``; the token and endpoints otherwise come from the ``S2_*`` variables."""
    parser.add_argument("--basin", required=True, help="the basin (option s2.basin of the library)")
    parser.add_argument(
        "--endpoint",
        default=None,
        help="one origin for both the account and the basin endpoint (e.g. a lite server's "
        "http://127.0.0.1:8080); default: S2_ACCOUNT_ENDPOINT / S2_BASIN_ENDPOINT, else the S2 cloud",
    )


def config_from(args: argparse.Namespace) -> S2Config:
    """The library's config for the parsed flags, read the way `S2Config.from_env` reads it."""
    overrides: dict[str, Any] = {}
    if args.endpoint is not None:
        overrides = {"account_endpoint": args.endpoint, "basin_endpoint": args.endpoint}
    try:
        return S2Config.from_env(basin=args.basin, **overrides)
    except ConfigError as exc:
        raise CliFailure(str(exc), USAGE) from exc


@asynccontextmanager
async def open_client(cfg: S2Config) -> AsyncIterator[S2]:
    """A client of its own, closed on the way out."""
    async with make_client(cfg) as client:
        yield client


@asynccontextmanager
async def open_basin(cfg: S2Config) -> AsyncIterator[S2Basin]:
    """The basin through a client of its own, closed on the way out."""
    async with open_client(cfg) as client:
        yield client.basin(cfg.basin)


def run_io(cfg: S2Config, stream: str | None, work: Coroutine[Any, Any, T]) -> T:
    """Run a command's I/O on a fresh event loop; SDK and transport errors come out as a `CliFailure`
    naming the endpoint, the basin and `stream`."""
    try:
        return asyncio.run(work)
    except BrokenPipeError:
        raise  # our stdout's reader went away (`| head`): not a connection failure (see `main`)
    except (S2Error, TransportError, OSError) as exc:
        raise explain(exc, cfg, stream) from exc
