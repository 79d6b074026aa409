"""``python -m s2_sink.lite --port 8080 [--host 127.0.0.1] [--data-dir DIR] [--token TOKEN]
[--allow-faults] [--throttle]``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from s2_sink.lite.server import serve


def main(argv: list[str] | None = None) -> None:
    """Run the server in the foreground; print the endpoint on stdout once it accepts connections."""
    parser = argparse.ArgumentParser(
        prog="python -m s2_sink.lite",
        description="Local S2-compatible server (h2c and HTTP/1.1 on one port).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port (0 = any free port; default 8080)")
    parser.add_argument("--data-dir", type=Path, default=None, help="make it durable: append-only log in DIR")
    parser.add_argument("--token", default=None, help="accept only this bearer token (others get 401 authn)")
    parser.add_argument("--allow-faults", action="store_true", help="enable the fault hooks at /_lite/faults")
    parser.add_argument(
        "--throttle",
        action="store_true",
        help="enforce S2's per-stream append limits (200 batches/s per connection, 100 MiB/s) with 429s",
    )
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )

    def ready(endpoint: str) -> None:
        # The first stdout line is the endpoint alone: LiteServer(subprocess=True) and scripts parse it.
        print(endpoint, flush=True)
        # Never echo a configured token: it is a secret.
        token = "<the --token value>" if args.token else "ignored"
        print(
            f"S2_ACCOUNT_ENDPOINT={endpoint} S2_BASIN_ENDPOINT={endpoint} S2_ACCESS_TOKEN={token}",
            file=sys.stderr,
            flush=True,
        )

    asyncio.run(
        serve(
            args.host,
            args.port,
            data_dir=args.data_dir,
            token=args.token,
            faults=args.allow_faults,
            throttle=args.throttle,
            ready=ready,
        )
    )


if __name__ == "__main__":
    main()
