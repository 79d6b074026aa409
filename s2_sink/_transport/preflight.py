"""The driver's check before the first micro-batch's tasks launch: the endpoint answers, the token is
accepted, the basin exists and the streams to write exist or will be created (or the streams to read exist),
so a wrong endpoint, token or basin fails once, on the driver, in `_transport.explain`'s words, rather than in
every task. One request per stream looked at (at most `MAX_PROBED_STREAMS`).

Writes list one entry at each target's name (a ``check_tail`` would create the stream in a basin with
``create_stream_on_read``); for a stream not found, the basin's config says whether the first append creates
it and whether the basin exists. Reads ``check_tail`` their streams. A 403 stops the preflight: the write or
read finds out what a narrow token allows.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Final

from s2_sdk import S2, S2Error, S2ServerError

from s2_sink._option_map import OptionMap, parse_bool
from s2_sink._transport import runtime as _runtime
from s2_sink._transport.explain import basin_endpoint, explain
from s2_sink._transport.retry import Patience, patiently
from s2_sink._transport.runtime import get_pool
from s2_sink.config import S2Config
from s2_sink.errors import PreflightError

__all__ = ["MAX_PROBED_STREAMS", "OPT_PREFLIGHT", "enabled", "preflight_read", "preflight_write"]

log = logging.getLogger(__name__)

OPT_PREFLIGHT: Final = "s2.preflight"
"""``format("s2")`` option (read and write, default ``true``): ``false`` skips the check."""

MAX_PROBED_STREAMS: Final = 2
"""Streams looked at: a routed or multi-stream job's others share the basin, token and endpoint."""


def enabled(options: Mapping[str, str]) -> bool:
    """Whether the ``format("s2")`` options ask for the preflight (`OPT_PREFLIGHT`, default ``true``)."""
    raw = OptionMap(options).text(OPT_PREFLIGHT)
    return raw is None or parse_bool(OPT_PREFLIGHT, raw)


class _Missing(Exception):
    """A probed stream does not exist (and will not be created)."""


async def _appends_create(client: S2, basin: str) -> bool:
    """Whether appends to a missing stream create it (the basin's ``create_stream_on_append``); 404
    ``basin_not_found`` if the basin does not exist. A token that may not read the basin's config cannot
    tell, so the append is given the benefit of the doubt."""
    try:
        config = await client.get_basin_config(basin)
    except S2ServerError as exc:
        if exc.status_code == 403:
            return True
        raise
    return bool(config.create_stream_on_append)


async def _write_probe(client: S2, cfg: S2Config, streams: Sequence[str]) -> None:
    basin = client.basin(cfg.basin)
    if not streams:
        await basin.list_streams(limit=1)
        await _appends_create(client, cfg.basin)  # a 404 basin_not_found if there is no basin
    for stream in streams[:MAX_PROBED_STREAMS]:
        page = await basin.list_streams(prefix=stream, limit=1)
        if any(i.name == stream and i.deleted_at is None for i in page.items):
            continue
        # Not listed: the basin may not exist either (its config answers 404 basin_not_found then).
        if not await _appends_create(client, cfg.basin) and not cfg.create_streams:
            raise _Missing(stream)


async def _read_probe(client: S2, cfg: S2Config, streams: Sequence[str]) -> None:
    for stream in streams[:MAX_PROBED_STREAMS]:
        try:
            await client.basin(cfg.basin).stream(stream).check_tail()
        except S2ServerError as exc:
            if exc.status_code == 404 and exc.code == "stream_not_found":
                raise _Missing(stream) from exc
            raise


def _run(cfg: S2Config, what: str, write: bool, streams: Sequence[str]) -> None:
    probe = _write_probe if write else _read_probe

    async def main() -> None:
        await probe(get_pool().client(cfg), cfg, streams)  # the pool is touched only on the loop

    fix = (
        "create it, or set create_streams=True (s2.create-streams)"
        if write
        else "check s2.stream / s2.streams"
    )
    try:
        # A query started during an outage waits for S2 as a running one does; the first wait's WARNING
        # names the endpoint and the fix at once, for the case where it is the configuration.
        _runtime.run(patiently(Patience.of(cfg), f"checking {what} before it starts", main))
    except _Missing as missing:
        where = f"basin {cfg.basin!r} at {basin_endpoint(cfg)}"
        raise PreflightError(
            f"{what}: stream {missing.args[0]!r} does not exist in {where}: {fix} (checked on the driver "
            "before any task ran)"
        ) from None
    except S2Error as exc:
        if isinstance(exc, S2ServerError) and exc.status_code == 403:
            log.info(
                "preflight of %s skipped: the token may not list or check streams (403 %s)", what, exc.code
            )
            return
        words = explain(exc, cfg, stream=streams[0] if streams else None, stream_fix=fix).message
        raise PreflightError(f"{what}: {words} (checked on the driver before any task ran)") from exc
    log.debug("preflight of %s passed: basin=%s streams=%s", what, cfg.basin, streams[:MAX_PROBED_STREAMS])


def preflight_write(cfg: S2Config, streams: Sequence[str], *, what: str) -> None:
    """Check, on the driver, that the write to `streams` (those known before any row is seen; empty for a
    routed write) can start: PreflightError naming the endpoint, basin, stream and the fix, if not."""
    _run(cfg, what, True, list(streams))


def preflight_read(cfg: S2Config, streams: Sequence[str], *, what: str) -> None:
    """Check, on the driver, that the streams to read exist and the endpoint, token and basin are good."""
    _run(cfg, what, False, list(streams))
