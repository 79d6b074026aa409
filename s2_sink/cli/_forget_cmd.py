"""``s2-sink ledger forget WRITER_ID STREAM``: drop a recreated stream's end from a writer's ledger.

The end is dropped by a snapshot record (a ``run``-scoped ``commit`` of the same batch, so the next run
recovers), refused unless the stream's tail is below the ledger's end. docs/exactly-once.md, *What it does
not cover*.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Final

from s2_sink._exactly_once.ledger import Ledger, ledger_stream_name
from s2_sink._exactly_once.ledger_records import SNAPSHOT_EVERY
from s2_sink.cli._command import NOT_FOUND, USAGE, CliFailure, config_from, open_basin, run_io

__all__ = ["FORGET_HELP", "forget"]

FORGET_HELP: Final = (
    "Drop STREAM's committed end from the ledger of WRITER_ID after the stream was deleted and recreated "
    "(the writer stopped with StreamResetError). The records committed before the deletion are gone; the "
    "writer's next run reads the new stream back from its start and commits its new end. Stop the query "
    "first. Refused while the stream's tail is at or past the ledger's end (nothing was lost)."
)


def forget(args: argparse.Namespace) -> int:
    """Append the snapshot without STREAM's end (see `FORGET_HELP`)."""
    cfg = config_from(args)
    name = ledger_stream_name(args.writer_id)
    stream = args.stream

    async def go() -> tuple[int, int]:
        async with open_basin(cfg) as basin:
            # A missing ledger is an error, not something to create (a check_tail would create it in a basin
            # that creates streams on read; getting the config never creates).
            await basin.get_stream_config(name)
            ledger = Ledger(basin, args.writer_id)
            state = await ledger.load()
            end = state.ends.get(stream)
            if end is None:
                raise CliFailure(
                    f"writer {args.writer_id!r} has no committed end for stream {stream!r}: nothing to "
                    "forget",
                    NOT_FOUND,
                )
            tail = (await basin.stream(stream).check_tail()).seq_num
            if tail >= end:
                raise CliFailure(
                    f"stream {stream!r} ends at {tail}, at or past the end {end} writer {args.writer_id!r} "
                    "committed for it: it was not reset, so its end stays (forgetting it would only make "
                    "the writer read the whole stream back)",
                    USAGE,
                )
            # Loading folds from the newest snapshot: make this record one (a delta cannot drop an end).
            ledger.state = dataclasses.replace(state, since=SNAPSHOT_EVERY)
            ends = {s: e for s, e in state.ends.items() if s != stream}
            # A commit that does not announce (intent records) leaves the next batch possibly in flight: the
            # next run recovers it, reading the new stream back from its start.
            forgotten = dataclasses.replace(
                state, kind="commit", scope="run", ends=ends, announces=False, intent=None
            )
            await ledger.append(forgotten)
            return end, tail

    try:
        end, tail = run_io(cfg, name, go())
    except CliFailure as exc:
        if exc.missing == "stream":
            raise CliFailure(
                f"writer {args.writer_id!r} has no ledger in basin {cfg.basin!r} (stream {name!r} does not "
                f"exist), or stream {stream!r} does not exist",
                NOT_FOUND,
            ) from exc
        raise
    print(
        f"ledger {name!r}: forgot the end {end} of stream {stream!r} (now ending at {tail}); the next run "
        "under this writer id reads it back from its start"
    )
    return 0
