"""``s2-sink ledger list|show|reset|forget``: the exactly-once ledgers of a basin, and one writer's ledger
decoded, reset, or rid of a recreated stream's end.

Records are decoded by the library's `LedgerState`; a reset or forget is appended through its `Ledger`,
conditionally (``match_seq_num``), so a writer still running under this identity fails with
`WriterConflictError` instead of interleaving. Forgetting writes a snapshot (a ``run``-scoped ``commit`` of
the same batch, so the next run recovers), refused unless the stream's tail is below the ledger's end
(docs/exactly-once.md, *What it does not cover*).
"""

from __future__ import annotations

import argparse
import dataclasses
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from s2_sdk import S2, S2Basin

from s2_sink._exactly_once.fencing import writer_hash
from s2_sink._exactly_once.ledger import Ledger, LedgerState, current_ledgers_of, ledger_stream_name, peek_all
from s2_sink._exactly_once.ledger_records import SNAPSHOT_EVERY, EndsFold, parse_record, record_base, state_of
from s2_sink._exactly_once.readback import read_span
from s2_sink.cli._command import (
    NOT_FOUND,
    PATIENCE,
    USAGE,
    CliFailure,
    config_from,
    iso_ms,
    print_json,
    run_io,
)
from s2_sink.cli._writers import LedgerSummary, ledger_summaries
from s2_sink.config import S2Config
from s2_sink.errors import CommitError

__all__ = ["FORGET_HELP", "RESET_HELP", "forget", "list_", "reset", "show"]

T = TypeVar("T")

RESET_HELP: Final = (
    "Make the ledger forget which micro-batches were committed: appends a record that keeps the epoch "
    "(so the fences on the target streams stay valid) and the stream positions, with no committed batch. "
    "The next run under this writer id starts from any batch id, e.g. 0 after its checkpoint was deleted. "
    "What that costs: exactly-once no longer covers batches from before the reset. A batch that was "
    "committed before it is written again if Spark replays it, and a batch an earlier run left half "
    "written is not read back, so its records can appear twice. Stop the query first (a running one "
    "fails with WriterConflictError); to start with a clean slate instead, use a new writer id."
)
FORGET_HELP: Final = (
    "Drop STREAM's committed end from the ledger of WRITER_ID after the stream was deleted and recreated "
    "(the writer stopped with StreamResetError). The records committed before the deletion are gone; the "
    "writer's next run reads the new stream back from its start and commits its new end. Stop the query "
    "first. Refused while the stream's tail is at or past the ledger's end (nothing was lost)."
)


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger record: its position, time (ms since the epoch) and decoded state, or why it cannot be
    decoded."""

    seq_num: int
    state: LedgerState | None
    error: str | None = None
    timestamp: int = 0


async def read_history(basin: S2Basin, writer_id: str) -> tuple[list[Entry], int]:
    """Every state record of the ledger, oldest first, with the stream ends folded up to it (``ends`` records
    fold into the record that claims them), and the ledger's tail."""
    name = ledger_stream_name(writer_id)
    stream = basin.stream(name)
    tail = (await stream.check_tail()).seq_num
    entries: list[Entry] = []
    fold = EndsFold()
    async for record in read_span(stream, 0, tail, patience=PATIENCE):
        if record.is_command_record():
            continue
        try:
            doc = parse_record(record.body, name)
            fold.add(doc)
            if doc["kind"] == "ends":
                continue
            base = record_base(doc, record.seq_num)
            state = state_of(doc, dict(fold.ends), base, fold.since, name)
            entries.append(Entry(record.seq_num, state, timestamp=record.timestamp))
        except CommitError as exc:
            entries.append(Entry(record.seq_num, None, str(exc), record.timestamp))
    return entries, tail


def _as_doc(entry: Entry) -> dict[str, Any]:
    if entry.state is None:
        return {"seq_num": entry.seq_num, "timestamp": entry.timestamp, "error": entry.error}
    st = entry.state
    return {
        "seq_num": entry.seq_num,
        "timestamp": entry.timestamp,
        "kind": st.kind,
        "epoch": st.epoch,
        "batch": st.committed,
        **({"intent": st.intent} if st.kind == "intent" else {}),
        "scope": st.scope,
        "run": st.run,
        "query_id": st.query_id,
        **({"moved_to": st.moved_to} if st.moved_to else {}),
        **({"config": st.shapes[-1].as_doc()} if st.shapes else {}),
        "ends": st.ends,
    }


def _as_line(entry: Entry) -> str:
    if entry.state is None:
        return f"{entry.seq_num:>6}  {iso_ms(entry.timestamp)}  unreadable: {entry.error}"
    st = entry.state
    ends = ", ".join(f"{s}={n}" for s, n in sorted(st.ends.items())) or "-"
    announced = f"  intent={st.intent}" if st.kind == "intent" else ""
    moved = f"  moved_to={st.moved_to}" if st.moved_to else ""
    config = ""
    if st.shapes:
        shape = st.shapes[-1]
        config = f"  config: {shape.routing} on_error={shape.on_error} dlq={shape.dlq or '-'}"
    return (
        f"{entry.seq_num:>6}  {iso_ms(entry.timestamp)}  {st.kind:<6}  epoch={st.epoch}  "
        f"batch={st.committed}{announced}  scope={st.scope}  run={st.run}  query={st.query_id or '-'}{moved}"
        f"{config}  ends: {ends}"
    )


def _summary(writer_id: str, last: LedgerState) -> str:
    if last.moved_to is not None:
        return (
            f"writer {writer_id!r} was taken over by writer {last.moved_to!r}, which goes on with its "
            f"batches: `s2-sink ledger show {last.moved_to}`"
        )
    if last.kind == "commit" and last.committed < 0:
        done = "no committed batch (reset)"
    elif last.kind == "commit":
        done = f"batch {last.committed} committed"
    elif last.kind == "intent":
        done = (
            f"batch {last.intent} announced in epoch {last.epoch} after batch {last.committed}, not committed"
        )
    else:
        done = f"epoch {last.epoch} opened after batch {last.committed}, not committed yet"
    nxt = "recovers (reads back) the next batch" if last.may_have_written_next else "writes the next batch"
    return f"writer {writer_id!r}: {done}; the next run opens epoch {last.epoch + 1} and {nxt}"


def show(args: argparse.Namespace) -> int:
    """Print every ledger record decoded (``--json``: as JSON lines), then the state. A streaming query id
    without a ledger shows the ledger of that query's one writer."""
    cfg = config_from(args)

    async def go(client: S2) -> tuple[str, list[Entry], int]:
        writer_id = await _writer_of(client, args.writer_id, cfg.basin)
        return (writer_id, *await read_history(client.basin(cfg.basin), writer_id))

    writer_id, entries, tail = run_io(cfg, None, go)
    name = ledger_stream_name(writer_id)
    if args.json:
        for entry in entries:
            print_json(_as_doc(entry))
        return 0
    if writer_id != args.writer_id:
        print(f"{args.writer_id!r} is the streaming query id of writer {writer_id!r}")
    print(f"ledger {name!r} in basin {cfg.basin!r}: {len(entries)} records, tail {tail}")
    for entry in entries:
        print(_as_line(entry))
    last = entries[-1].state if entries else None
    if last is not None:
        print(_summary(writer_id, last))
    return 0


async def _writer_of(client: S2, name: str, basin_name: str) -> str:
    """``name`` when it has a ledger, else the one writer whose ledger holds streaming query ``name``'s
    batches."""
    basin = client.basin(basin_name)
    stream = ledger_stream_name(name)
    if [i async for i in basin.list_all_streams(prefix=stream) if i.name == stream]:
        return name  # its records are shown (an unreadable one as such)
    states = await peek_all(basin, skip_unreadable=True)
    ids = current_ledgers_of(states, name)
    if len(ids) == 1:
        return ids[0]
    if ids:
        raise CliFailure(
            f"{name!r} is the streaming query id of several exactly-once writers ({', '.join(ids)}): "
            "show one of them",
            NOT_FOUND,
        )
    # S2 lists a missing basin's streams as none, and looks a stream up before its basin: the basin's own
    # config answers 404 basin_not_found (worded by `run_io`).
    await client.get_basin_config(basin_name)
    raise CliFailure(
        f"writer {name!r} has no ledger in basin {basin_name!r} (stream {ledger_stream_name(name)!r} does "
        "not exist), and no writer of a streaming query with that id does: it never ran exactly-once here. "
        "The writer "
        "id is the S2Writer's writer_id (s2.writer-id), by default the streaming query id; "
        "`s2-sink ledger list` shows the basin's writers",
        NOT_FOUND,
    )


def _on_ledger(
    cfg: S2Config, writer_id: str, work: Callable[[S2Basin, Ledger], Awaitable[T]], missing: str
) -> T:
    """``work`` on the writer's ledger, which must exist: getting its config never creates it (a check_tail
    would, in a basin that creates streams on read)."""
    name = ledger_stream_name(writer_id)

    async def go(client: S2) -> T:
        basin = client.basin(cfg.basin)
        await basin.get_stream_config(name)
        return await work(basin, Ledger(basin, writer_id, patience=PATIENCE))

    try:
        return run_io(cfg, name, go)
    except CliFailure as exc:
        if exc.missing == "stream":
            raise CliFailure(
                f"writer {writer_id!r} has no ledger in basin {cfg.basin!r} (stream {name!r} does not "
                f"exist){missing}",
                NOT_FOUND,
            ) from exc
        raise


def reset(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    name = ledger_stream_name(args.writer_id)

    async def work(_: S2Basin, ledger: Ledger) -> LedgerState | None:
        before = await ledger.load()
        if before.kind == "none" or not args.yes:
            return before
        reset = dataclasses.replace(
            before, kind="commit", committed=-1, run=f"reset-{uuid.uuid4().hex}", query_id=None, scope="batch"
        )
        await ledger.append(reset)
        return None

    before = _on_ledger(cfg, args.writer_id, work, ": there is nothing to reset")
    if before is None:
        print(
            f"ledger {name!r} reset: the next run under writer id {args.writer_id!r} may start at any batch"
        )
        return 0
    if before.kind == "none":
        print(f"ledger {name!r} is empty: there is nothing to reset")
        return 0
    raise CliFailure(
        f"not resetting the ledger of writer {args.writer_id!r} (last record: {before.kind} of batch "
        f"{before.committed}, epoch {before.epoch}) without --yes. {RESET_HELP}",
        USAGE,
    )


def forget(args: argparse.Namespace) -> int:
    cfg = config_from(args)
    writer_id, stream = args.writer_id, args.stream

    async def work(basin: S2Basin, ledger: Ledger) -> tuple[int, int]:
        state = await ledger.load()
        end = state.ends.get(stream)
        if end is None:
            raise CliFailure(
                f"writer {writer_id!r} has no committed end for stream {stream!r}: nothing to forget",
                NOT_FOUND,
            )
        tail = (await basin.stream(stream).check_tail()).seq_num
        if tail >= end:
            raise CliFailure(
                f"stream {stream!r} ends at {tail}, at or past the end {end} writer {writer_id!r} "
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

    end, tail = _on_ledger(cfg, writer_id, work, f", or stream {stream!r} does not exist")
    print(
        f"ledger {ledger_stream_name(writer_id)!r}: forgot the end {end} of stream {stream!r} (now ending at "
        f"{tail}); the next run under this writer id reads it back from its start"
    )
    return 0


def _list_line(summary: LedgerSummary, width: int) -> str:
    when = iso_ms(summary.timestamp)
    if summary.state is None:
        return f"{summary.writer_id:<{width}}  unreadable: {summary.error}  (last record {when})"
    st = summary.state
    if st.kind == "none":
        done = "empty"
    elif st.committed < 0:
        done = "no committed batch" + (" (reset)" if st.kind == "commit" else "")
    else:
        done = f"batch {st.committed} committed"
    if st.kind == "open":
        done += f", epoch {st.epoch} open"
    return (
        f"{summary.writer_id:<{width}}  hash {writer_hash(summary.writer_id)}  epoch {st.epoch}  {done}  "
        f"last record {when}  query {st.query_id or '-'}"
    )


def list_(args: argparse.Namespace) -> int:
    """Print every exactly-once ledger in the basin: writer id, last committed batch, time of the last
    record."""
    cfg = config_from(args)

    summaries = run_io(cfg, None, lambda client: ledger_summaries(client.basin(cfg.basin)))
    if args.json:
        for summary in summaries:
            print_json(summary.as_doc())
        return 0
    print(f"basin {cfg.basin!r}: {len(summaries)} exactly-once ledgers (times in UTC)")
    width = max((len(s.writer_id) for s in summaries), default=0)
    for summary in summaries:
        print(_list_line(summary, width))
    return 0
