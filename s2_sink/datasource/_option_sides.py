"""Which ``format("s2")`` options belong to reads and which to writes, and the refusal of the wrong side's.

A read and a write share the connection options of `S2Config.from_options` and ``s2.stream``/``s2.format``;
everything else applies to one side only. An option given to the other side would be silently meaningless
(Spark hands the reader's options only to the reader, but users often keep one option dict), so it is
refused on the driver with a message saying which side it belongs to; an unknown key (a typo) gets the
closest keys this side takes ("did you mean"), and the whole list only when none is close.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Final, Literal

from s2_sink._option_map import OptionMap
from s2_sink._read import read_options
from s2_sink.config import OPTION_KEYS, WRITE_ONLY_OPTION_KEYS
from s2_sink.datasource._write_keys import WRITE_KEYS
from s2_sink.errors import ConfigError

__all__ = ["OUR_PREFIXES", "READ_KEYS", "Side", "accepted_keys", "check_side", "check_strays"]

Side = Literal["read", "write"]

OUR_PREFIXES: Final = ("s2.", "sink.")
"""Spark adds options of its own (checkpointLocation, path, ...); only these namespaces are ours to check."""

_WHAT: Final[dict[Side, str]] = {
    "read": "reads (spark.read / spark.readStream .format('s2'))",
    "write": "writes (df.write / df.writeStream .format('s2'))",
}


READ_KEYS: Final = frozenset(v for name, v in vars(read_options).items() if name.startswith("OPT_"))
"""Options the reader parses itself (every OPT_ of read_options); any other must be a connection option."""


def accepted_keys(side: Side) -> frozenset[str]:
    """Every option key a ``format("s2")`` read or write accepts: its own keys and the connection keys (a
    read leaves out those that only shape appends)."""
    connection = frozenset(OPTION_KEYS)
    if side == "read":
        return READ_KEYS | (connection - WRITE_ONLY_OPTION_KEYS)
    return WRITE_KEYS | connection


def check_side(options: Mapping[str, str], side: Side) -> None:
    """Refuse any of our options (``s2.*``, ``sink.*``) that this side does not accept: ConfigError saying
    which side the option belongs to, or that it is unknown and which accepted keys are closest."""
    opts = OptionMap(options)
    mine = accepted_keys(side)
    other: Side = "write" if side == "read" else "read"
    theirs = accepted_keys(other)
    for key in sorted(opts):
        if not key.startswith(OUR_PREFIXES) or key in mine:
            continue
        spelled = f"{opts.spelling(key)}={str(opts[key])!r}"
        if key in theirs:
            raise ConfigError(
                f"option {spelled} applies to format('s2') {_WHAT[other]} only, not to {side}s: drop it here"
            )
        close = difflib.get_close_matches(key, sorted(mine), n=3, cutoff=0.6)
        if close:
            raise ConfigError(f"unknown option {spelled}: did you mean {' or '.join(close)}?")
        raise ConfigError(
            f"unknown option {spelled}. format('s2') {_WHAT[side]} accept: {', '.join(sorted(mine))}"
        )


def check_strays(options: Mapping[str, str], side: Side) -> None:
    """Refuse an option outside our namespaces that is one of ours misspelt (``s2_stream``, ``stream-prefix``,
    ``max-records-per-trigger``): Spark's own options (path, checkpointLocation) pass, and so does anything
    not close to one of our keys, since other sources' options may share the option map."""
    opts = OptionMap(options)
    mine = accepted_keys(side)
    # A key without its namespace ("stream-prefix") is compared too: the likeliest slip.
    bare = {key.split(".", 1)[1]: key for key in mine}
    for key in sorted(opts):
        if key.startswith(OUR_PREFIXES):
            continue
        close = difflib.get_close_matches(key, [*mine, *bare], n=1, cutoff=0.85)
        if close:
            meant = bare.get(close[0], close[0])
            raise ConfigError(
                f"unknown option {opts.spelling(key)}={str(opts[key])!r}: did you mean {meant}? format('s2') "
                "options start with s2. or sink."
            )
