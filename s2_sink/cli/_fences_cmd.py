"""``s2-sink fences clear STREAM...``. The clearing fence is conditional on the token found, so what it
reports cleared is exactly what it cleared; why that never breaks a running writer: docs/exactly-once.md,
*Fencing tokens*.
"""

from __future__ import annotations

import argparse
from typing import Final

from s2_sdk import S2, AppendInput, CommandRecord, FencingTokenMismatchError, S2Stream

from s2_sink.cli._command import CliFailure, config_from, run_io
from s2_sink.cli._writers import describe_token, writers_by_hash

__all__ = ["HELP", "clear", "read_fence"]

HELP: Final = (
    "Remove the fencing token of each STREAM (S2 accepts appends without a token either way; appends "
    "that carry a token must match it). Use it when a FencedError names a token whose writer is gone for "
    "good, or after deleting a ledger. A running exactly-once writer is not harmed: it fences the stream "
    "again on its next append."
)

# A token no writer uses: the first conditional clear is refused and the 412 shows the current token.
_PROBE: Final = "s2-sink-cli:probe"
_ATTEMPTS: Final = 5


async def read_fence(stream: S2Stream) -> str:
    """The stream's fencing token (``""``: none), unchanged: an append conditional on a token nobody uses is
    refused, naming the current token (were the probe the current one, it would only fence to it again)."""
    try:
        await stream.append(AppendInput(records=[CommandRecord.fence(_PROBE)], fencing_token=_PROBE))
    except FencingTokenMismatchError as exc:
        return exc.expected_fencing_token
    return _PROBE


async def clear_fence(stream: S2Stream) -> str:
    """Clear an existing stream's fence; returns the token that was on it (``""``: none)."""
    seen = _PROBE
    for _ in range(_ATTEMPTS):
        try:
            await stream.append(AppendInput(records=[CommandRecord.fence("")], fencing_token=seen))
        except FencingTokenMismatchError as exc:
            seen = exc.expected_fencing_token
            if seen == "":
                return ""
            continue
        return seen
    raise CliFailure(f"stream {stream.name!r}: its fencing token kept changing (last seen {seen!r}); retry")


def clear(args: argparse.Namespace) -> int:
    """Clear each named stream's fence in order, stopping at the first failure."""
    cfg = config_from(args)

    writers = run_io(cfg, None, lambda client: writers_by_hash(client.basin(cfg.basin)))
    for name in args.streams:

        async def go(client: S2, name: str = name) -> str:
            basin = client.basin(cfg.basin)
            # A missing stream is an error, even in a basin that creates streams on append or on read
            # (where a check_tail would create it): getting its config never creates it.
            await basin.get_stream_config(name)
            return await clear_fence(basin.stream(name))

        was = run_io(cfg, name, go)
        if was:
            print(f"stream {name!r}: cleared fencing token {describe_token(was, writers)}")
        else:
            print(f"stream {name!r}: had no fencing token")
    return 0
