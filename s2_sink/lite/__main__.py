"""``python -m s2_sink.lite --port 8080 [--host 127.0.0.1] [--basin NAME]... [--data-dir DIR] [--token TOKEN]
[--allow-faults] [--throttle] [--deletion-delay SECONDS]``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shlex
import signal
import sys
from pathlib import Path

import httpx

from s2_sink.lite._api_errors import ApiError
from s2_sink.lite._store import DELETION_DELAY_S, validate_basin_name
from s2_sink.lite.server import serve


def _basin_name(text: str) -> str:
    try:
        validate_basin_name(text)
    except ApiError as exc:
        raise argparse.ArgumentTypeError(exc.message) from exc
    return text


def exports(endpoint: str, token: str | None) -> str:
    """Shell lines to paste or ``eval``: they point ``S2Config`` and ``s2-sink`` at this server."""
    values = {"S2_ACCOUNT_ENDPOINT": endpoint, "S2_BASIN_ENDPOINT": endpoint}
    if token is None:
        values["S2_ACCESS_TOKEN"] = "ignored"  # any non-empty value: the server does not check it
    line = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in values.items())
    # Never echo a configured token: it is a secret.
    return line if token is None else line + "\n# and export S2_ACCESS_TOKEN set to the --token value"


async def _create_basins(endpoint: str, names: list[str], token: str | None) -> None:
    """Create the basins that do not exist yet through the server's own API, as any client would (create,
    not ensure: an ensure would reset the config of one kept in ``--data-dir``)."""
    headers = {"authorization": f"Bearer {token or 'ignored'}"}
    async with httpx.AsyncClient(http1=False, http2=True, timeout=10.0) as client:
        for name in names:
            doc = {"basin": name, "config": {"create_stream_on_append": True}}
            resp = await client.post(f"{endpoint}/v1/basins", json=doc, headers=headers)
            if resp.status_code == 409 and resp.json().get("code") == "resource_already_exists":
                continue
            if resp.status_code >= 300:
                raise RuntimeError(f"cannot create basin {name!r}: HTTP {resp.status_code} {resp.text}")


def main(argv: list[str] | None = None, *, prog: str = "python -m s2_sink.lite") -> None:
    """Run the server in the foreground; print the endpoint on stdout once it accepts connections (and the
    ``--basin`` basins exist), and the shell exports on stderr."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Local S2-compatible server (h2c and HTTP/1.1 on one port).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (0 = any free port; default 8080)")
    parser.add_argument(
        "--basin",
        dest="basins",
        action="append",
        default=[],
        type=_basin_name,
        metavar="NAME",
        help="create this basin at start (repeatable), with create_stream_on_append so a first write "
        "creates its stream; an existing one (--data-dir) is kept",
    )
    parser.add_argument("--data-dir", type=Path, default=None, help="make it durable: append-only log in DIR")
    parser.add_argument("--token", default=None, help="accept only this bearer token (others get 401 authn)")
    parser.add_argument("--allow-faults", action="store_true", help="enable the fault hooks at /_lite/faults")
    parser.add_argument(
        "--throttle",
        action="store_true",
        help="enforce S2's per-stream append limits (200 batches/s per connection, 100 MiB/s) with 429s",
    )
    parser.add_argument(
        "--deletion-delay",
        type=float,
        default=DELETION_DELAY_S,
        metavar="SECONDS",
        help=f"how long a deleted basin or stream stays pending (409 *_deletion_pending) before it is gone "
        f"(default {DELETION_DELAY_S})",
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    failed: list[str] = []
    pending: set[asyncio.Task[None]] = set()

    async def announce(endpoint: str) -> None:
        try:
            await _create_basins(endpoint, args.basins, args.token)
        except (RuntimeError, httpx.HTTPError) as exc:
            failed.append(str(exc))
            os.kill(os.getpid(), signal.SIGTERM)  # serve() stops on SIGTERM; main() then exits 1
            return
        # The first stdout line is the endpoint alone: LiteServer(subprocess=True) and scripts parse it.
        print(endpoint, flush=True)
        if args.basins:
            print(f"# basins: {', '.join(args.basins)}", file=sys.stderr)
        print(exports(endpoint, args.token), file=sys.stderr, flush=True)

    def ready(endpoint: str) -> None:
        # Called on the server's loop: the basins are created by a task, while the server answers.
        task = asyncio.get_running_loop().create_task(announce(endpoint))
        pending.add(task)
        task.add_done_callback(pending.discard)

    asyncio.run(
        serve(
            args.host,
            args.port,
            data_dir=args.data_dir,
            token=args.token,
            faults=args.allow_faults,
            throttle=args.throttle,
            deletion_delay_s=args.deletion_delay,
            ready=ready,
        )
    )
    if failed:
        print(f"{prog}: {failed[0]}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
