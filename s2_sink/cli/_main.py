"""The ``s2-sink`` command line, declared once as a table, and the one place where failures become messages
and exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Final, NamedTuple

from s2_sink.cli import _ledger_cmd, _streams_cmd
from s2_sink.cli._command import EXIT_CODES, FAILED, INTERRUPTED, OK, CliFailure, Run, config_from
from s2_sink.errors import S2SinkError

__all__ = ["COMMANDS", "build_parser", "main"]

Arg = tuple[tuple[str, ...], dict[str, Any]]
_JSON_HELP: Final = "one JSON object per line, times as milliseconds since the epoch (text: ISO 8601 UTC)"


def arg(*names: str, **settings: Any) -> Arg:
    return names, settings


class Leaf(NamedTuple):
    """A command, its help (not its docstring: ``python -OO`` strips those), its arguments besides the
    connection flags, its description, and the help of its ``--json`` (None: it has none)."""

    run: Run
    help: str
    args: tuple[Arg, ...] = ()
    description: str | None = None
    json_help: str | None = _JSON_HELP


GROUPS: Final = {
    "ledger": "list the exactly-once ledgers of a basin, show or reset the ledger of a writer",
    "streams": "list the streams of a basin, describe one",
    "fences": "clear fencing tokens",
}
_WRITER_ID: Final = arg("writer_id", metavar="WRITER_ID")
_STREAM: Final = arg("stream", metavar="STREAM")
_FORMAT_HELP: Final = (
    "insert: body (JSON, text or base64), headers; upsert: key, action, value (default insert)"
)
_N_HELP: Final = "print the last N records (default 10); command records do not count"

COMMANDS: Final[dict[str, Leaf]] = {  # "GROUP ACTION" or "COMMAND"
    "ledger list": Leaf(
        _ledger_cmd.list_,
        "every exactly-once ledger: writer id, last committed batch, time of the last record",
    ),
    "ledger show": Leaf(
        _ledger_cmd.show,
        "print every ledger record decoded: kind, epoch, batch, scope, run, stream ends",
        (arg("writer_id", metavar="WRITER_ID", help="the writer id (the streaming query id by default)"),),
    ),
    "ledger reset": Leaf(
        _ledger_cmd.reset,
        "forget the committed batches",
        (
            _WRITER_ID,
            arg("--yes", action="store_true", help="confirm: reset the ledger (see above for what it means)"),
        ),
        _ledger_cmd.RESET_HELP,
        None,
    ),
    "ledger forget": Leaf(
        _ledger_cmd.forget,
        "drop a recreated stream's committed end",
        (_WRITER_ID, _STREAM),
        _ledger_cmd.FORGET_HELP,
        None,
    ),
    "streams list": Leaf(
        _streams_cmd.list_streams,
        "every stream of the basin, with its creation time",
        (arg("--prefix", default="", help="only streams whose name starts with PREFIX"),),
    ),
    "streams describe": Leaf(
        _streams_cmd.describe,
        "one stream's tail, fencing token (with its writer id) and configuration",
        (_STREAM,),
    ),
    "fences clear": Leaf(
        _streams_cmd.clear_fences,
        "remove the fencing token of streams",
        (arg("streams", nargs="+", metavar="STREAM"),),
        _streams_cmd.CLEAR_HELP,
        None,
    ),
    "tail": Leaf(
        _streams_cmd.tail,
        "print a stream's last records decoded, one JSON object per line",
        (
            _STREAM,
            arg("--format", choices=("insert", "upsert"), default="insert", help=_FORMAT_HELP),
            arg("-n", type=int, default=10, help=_N_HELP),
            arg("--follow", "-f", action="store_true", help="keep printing new records until Ctrl-C"),
        ),
        json_help="timestamps as milliseconds since the epoch, as S2 stores them",
    ),
}

_CONNECTION: Final = (
    arg("--basin", required=True, help="the basin (option s2.basin of the library)"),
    arg(
        "--endpoint",
        help="one origin for both the account and the basin endpoint (e.g. a lite server's "
        "http://127.0.0.1:8080); default: S2_ACCOUNT_ENDPOINT / S2_BASIN_ENDPOINT, else the S2 cloud",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="s2-sink",
        description="Look at and repair the state exactly-once delivery keeps in S2, read streams, run the "
        "lite server. Connection settings as in the library: S2_ACCESS_TOKEN, S2_ACCOUNT_ENDPOINT and "
        "S2_BASIN_ENDPOINT, or --endpoint; the basin with --basin.",
        epilog="exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    groups: dict[str, argparse._SubParsersAction[argparse.ArgumentParser]] = {}
    for name, leaf in COMMANDS.items():
        group, _, action = name.rpartition(" ")
        if group and group not in groups:
            actions = commands.add_parser(group, help=GROUPS[group])
            groups[group] = actions.add_subparsers(dest="action", required=True, metavar="ACTION")
        sub = (groups[group] if group else commands).add_parser(
            action, help=leaf.help, description=leaf.description
        )
        json = () if leaf.json_help is None else (arg("--json", action="store_true", help=leaf.json_help),)
        for names, settings in (*json, *_CONNECTION, *leaf.args):
            sub.add_argument(*names, **settings)
        sub.set_defaults(run=leaf.run)
    lite = commands.add_parser(
        "lite",
        help="run the lite S2 server (same as s2-sink-lite; `s2-sink lite --help` for its flags)",
        add_help=False,
    )
    # Never parsed here: `main` hands everything after "lite" to the lite server's own parser.
    lite.add_argument("lite_args", nargs=argparse.REMAINDER)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lite"]:  # argparse cannot pass "--port ..." through a subcommand untouched
        from s2_sink.lite.__main__ import main as lite_main  # noqa: PLC0415 - needs the [lite] extra

        lite_main(argv[1:], prog="s2-sink lite")
        return OK
    args = build_parser().parse_args(argv)
    run: Run = args.run
    try:
        run(args, config_from(args)).print(getattr(args, "json", False))
    except CliFailure as exc:
        print(f"s2-sink: {exc}", file=sys.stderr)
        return exc.code
    except S2SinkError as exc:  # the library's own errors already say what went wrong and the fix
        print(f"s2-sink: {exc}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # the reader of our output stopped early (`s2-sink tail ... | head -1`)
        # Point stdout at /dev/null so flushing at exit neither fails nor prints on stderr.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return OK
