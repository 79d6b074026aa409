"""The ``s2-sink`` argument parser and the one place where failures become messages and exit codes."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from s2_sink.cli import _fences_cmd, _ledger_cmd, _streams_cmd
from s2_sink.cli._command import EXIT_CODES, FAILED, INTERRUPTED, OK, CliFailure, add_connection_flags
from s2_sink.errors import S2SinkError

__all__ = ["build_parser", "main"]

Command = Callable[[argparse.Namespace], int]

_JSON_HELP = "one JSON object per line, times as milliseconds since the epoch (text: ISO 8601 UTC)"


def _exit_codes() -> str:
    return "exit codes:\n" + "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items())


def _tail(args: argparse.Namespace) -> int:
    from s2_sink.cli._tail_cmd import tail  # noqa: PLC0415 - the decoders import pyspark

    return tail(args)


def _lite(lite_args: list[str]) -> int:
    from s2_sink.lite.__main__ import main as lite_main  # noqa: PLC0415 - needs the [lite] extra

    lite_main(lite_args, prog="s2-sink lite")
    return 0


def _leaf(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    name: str,
    run: Command,
    *,
    help: str,
    description: str | None = None,
    json_help: str | None = _JSON_HELP,
) -> argparse.ArgumentParser:
    """A command's parser with the connection flags (and ``--json`` unless ``json_help`` is None)."""
    parser = commands.add_parser(name, help=help, description=description)
    if json_help is not None:
        parser.add_argument("--json", action="store_true", help=json_help)
    add_connection_flags(parser)
    parser.set_defaults(run=run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each leaf parser sets ``run`` to its command."""
    parser = argparse.ArgumentParser(
        prog="s2-sink",
        description="Look at and repair the state exactly-once delivery keeps in S2, read streams, run the "
        "lite server. Connection settings as in the library: S2_ACCESS_TOKEN, S2_ACCOUNT_ENDPOINT and "
        "S2_BASIN_ENDPOINT, or --endpoint; the basin with --basin.",
        epilog=_exit_codes(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ledger = commands.add_parser(
        "ledger", help="list the exactly-once ledgers of a basin, show or reset the ledger of a writer"
    )
    ledger_commands = ledger.add_subparsers(dest="action", required=True, metavar="ACTION")
    _leaf(
        ledger_commands,
        "list",
        _ledger_cmd.list_,
        help="every exactly-once ledger: writer id, last committed batch, time of the last record",
    )
    show = _leaf(
        ledger_commands,
        "show",
        _ledger_cmd.show,
        help="print every ledger record decoded: kind, epoch, batch, scope, run, stream ends",
    )
    show.add_argument(
        "writer_id", metavar="WRITER_ID", help="the writer id (the streaming query id by default)"
    )
    reset = _leaf(
        ledger_commands,
        "reset",
        _ledger_cmd.reset,
        json_help=None,
        help="forget the committed batches",
        description=_ledger_cmd.RESET_HELP,
    )
    reset.add_argument("writer_id", metavar="WRITER_ID")
    reset.add_argument(
        "--yes", action="store_true", help="confirm: reset the ledger (see above for what it means)"
    )
    forget = _leaf(
        ledger_commands,
        "forget",
        _ledger_cmd.forget,
        json_help=None,
        help="drop a recreated stream's committed end",
        description=_ledger_cmd.FORGET_HELP,
    )
    forget.add_argument("writer_id", metavar="WRITER_ID")
    forget.add_argument("stream", metavar="STREAM")

    streams = commands.add_parser("streams", help="list the streams of a basin, describe one")
    streams_commands = streams.add_subparsers(dest="action", required=True, metavar="ACTION")
    slist = _leaf(
        streams_commands,
        "list",
        _streams_cmd.list_streams,
        help="every stream of the basin, with its creation time",
    )
    slist.add_argument("--prefix", default="", help="only streams whose name starts with PREFIX")
    sdesc = _leaf(
        streams_commands,
        "describe",
        _streams_cmd.describe,
        help="one stream's tail, fencing token (with its writer id) and configuration",
    )
    sdesc.add_argument("stream", metavar="STREAM")

    fences = commands.add_parser("fences", help="clear fencing tokens")
    fences_commands = fences.add_subparsers(dest="action", required=True, metavar="ACTION")
    clear = _leaf(
        fences_commands,
        "clear",
        _fences_cmd.clear,
        json_help=None,
        help="remove the fencing token of streams",
        description=_fences_cmd.HELP,
    )
    clear.add_argument("streams", nargs="+", metavar="STREAM")

    tail = _leaf(
        commands,
        "tail",
        _tail,
        json_help="timestamps as milliseconds since the epoch, as S2 stores them",
        help="print a stream's last records decoded, one JSON object per line",
    )
    tail.add_argument("stream", metavar="STREAM")
    tail.add_argument(
        "--format",
        choices=("insert", "upsert"),
        default="insert",
        help="insert: body (JSON, text or base64), headers; upsert: key, action, value (default insert)",
    )
    tail.add_argument(
        "-n", type=int, default=10, help="print the last N records (default 10); command records do not count"
    )
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new records until Ctrl-C")

    lite = commands.add_parser(
        "lite",
        help="run the lite S2 server (same as s2-sink-lite; `s2-sink lite --help` for its flags)",
        add_help=False,
    )
    # Never parsed here: `main` hands everything after "lite" to the lite server's own parser.
    lite.add_argument("lite_args", nargs=argparse.REMAINDER)
    return parser


def quiet_closed_stdout() -> None:
    """Point stdout at /dev/null once its reader went away, so flushing at exit neither fails nor prints on
    stderr."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["lite"]:  # argparse cannot pass "--port ..." through a subcommand untouched
        return _lite(argv[1:])
    args = build_parser().parse_args(argv)
    run: Command = args.run
    try:
        return run(args)
    except CliFailure as exc:
        print(f"s2-sink: {exc}", file=sys.stderr)
        return exc.code
    except S2SinkError as exc:  # the library's own errors already say what went wrong and the fix
        print(f"s2-sink: {exc}", file=sys.stderr)
        return FAILED
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:  # the reader of our output stopped early (`s2-sink tail ... | head -1`)
        quiet_closed_stdout()
        return OK
