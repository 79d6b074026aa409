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
from typing import Any, Final

from s2_sdk import S2, S2Basin, S2ServerError

from s2_sink._exactly_once.fencing import writer_hash
from s2_sink._exactly_once.ledger import (
    LEDGER_PREFIX,
    Ledger,
    LedgerState,
    current_ledgers_of,
    ledger_stream_name,
    peek_all,
)
from s2_sink._exactly_once.ledger_records import SNAPSHOT_EVERY, EndsFold, parse_record, record_base, state_of
from s2_sink._exactly_once.readback import read_span
from s2_sink._transport.explain import is_stream_deleting
from s2_sink.cli._command import NOT_FOUND, PATIENCE, USAGE, CliFailure, Output, iso_ms, run_io
from s2_sink.config import S2Config
from s2_sink.errors import CommitError

__all__ = ["FORGET_HELP", "RESET_HELP", "forget", "list_", "reset", "show", "writer_ids"]

Doc = dict[str, Any]

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


async def writer_ids(basin: S2Basin) -> list[str]:
    return [info.name[len(LEDGER_PREFIX) :] async for info in basin.list_all_streams(prefix=LEDGER_PREFIX)]


async def _ledger_docs(basin: S2Basin) -> list[Doc]:
    """Every ledger of the basin with its last state; one that cannot be decoded is listed with why."""
    out: list[Doc] = []
    for writer_id in await writer_ids(basin):
        ledger = Ledger(basin, writer_id, patience=PATIENCE)
        try:
            position = await basin.stream(ledger.name).check_tail()
            peeked = await ledger.peek()
        except S2ServerError as exc:
            if exc.status_code == 404 or is_stream_deleting(exc):
                continue  # deleted between the listing and now
            raise
        except CommitError as exc:
            peeked, error = None, str(exc)
        else:
            if peeked is None:  # deleted between the listing and now
                continue
        doc = {"writer_id": writer_id, "writer_hash": writer_hash(writer_id), "stream": ledger.name}
        if peeked is None:
            out.append({**doc, "tail": position.seq_num, "timestamp": position.timestamp, "error": error})
            continue
        tail, st = peeked
        state = {"kind": st.kind, "epoch": st.epoch, "committed": st.committed, "scope": st.scope}
        out.append({**doc, "tail": tail, "timestamp": position.timestamp, **state, "query_id": st.query_id})
    return out


def _list_line(doc: Doc, width: int) -> str:
    when = iso_ms(doc["timestamp"])
    if "error" in doc:
        return f"{doc['writer_id']:<{width}}  unreadable: {doc['error']}  (last record {when})"
    kind, committed, epoch = doc["kind"], doc["committed"], doc["epoch"]
    if kind == "none":
        done = "empty"
    elif committed < 0:
        done = "no committed batch" + (" (reset)" if kind == "commit" else "")
    else:
        done = f"batch {committed} committed"
    if kind == "open":
        done += f", epoch {epoch} open"
    return (
        f"{doc['writer_id']:<{width}}  hash {doc['writer_hash']}  epoch {epoch}  {done}  "
        f"last record {when}  query {doc['query_id'] or '-'}"
    )


def list_(args: argparse.Namespace, cfg: S2Config) -> Output:
    docs = run_io(cfg, None, lambda client: _ledger_docs(client.basin(cfg.basin)))
    width = max((len(d["writer_id"]) for d in docs), default=0)
    head = f"basin {cfg.basin!r}: {len(docs)} exactly-once ledgers (times in UTC)"
    return Output([head, *(_list_line(doc, width) for doc in docs)], docs)


async def _history(basin: S2Basin, writer_id: str) -> tuple[list[tuple[Doc, LedgerState | None]], int]:
    """Every state record of the ledger decoded, oldest first, with the stream ends folded up to it (``ends``
    records fold into the record that claims them), and the ledger's tail."""
    name = ledger_stream_name(writer_id)
    stream = basin.stream(name)
    tail = (await stream.check_tail()).seq_num
    entries: list[tuple[Doc, LedgerState | None]] = []
    fold = EndsFold()
    async for record in read_span(stream, 0, tail, patience=PATIENCE):
        if record.is_command_record():
            continue
        head: Doc = {"seq_num": record.seq_num, "timestamp": record.timestamp}
        try:
            doc = parse_record(record.body, name)
            fold.add(doc)
            if doc["kind"] == "ends":
                continue
            st = state_of(doc, dict(fold.ends), record_base(doc, record.seq_num), fold.since, name)
        except CommitError as exc:
            entries.append(({**head, "error": str(exc)}, None))
            continue
        head |= {"kind": st.kind, "epoch": st.epoch, "batch": st.committed}
        head |= {"intent": st.intent} if st.kind == "intent" else {}
        head |= {"scope": st.scope, "run": st.run, "query_id": st.query_id}
        head |= {"moved_to": st.moved_to} if st.moved_to else {}
        head |= {"config": st.shapes[-1].as_doc()} if st.shapes else {}
        entries.append(({**head, "ends": st.ends}, st))
    return entries, tail


def _show_line(doc: Doc, st: LedgerState | None) -> str:
    at = f"{doc['seq_num']:>6}  {iso_ms(doc['timestamp'])}"
    if st is None:
        return f"{at}  unreadable: {doc['error']}"
    ends = ", ".join(f"{s}={n}" for s, n in sorted(st.ends.items())) or "-"
    announced = f"  intent={st.intent}" if st.kind == "intent" else ""
    moved = f"  moved_to={st.moved_to}" if st.moved_to else ""
    shape = st.shapes[-1] if st.shapes else None
    config = f"  config: {shape.routing} on_error={shape.on_error} dlq={shape.dlq or '-'}" if shape else ""
    return (
        f"{at}  {st.kind:<6}  epoch={st.epoch}  batch={st.committed}{announced}  scope={st.scope}  "
        f"run={st.run}  query={st.query_id or '-'}{moved}{config}  ends: {ends}"
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


def show(args: argparse.Namespace, cfg: S2Config) -> Output:
    # Every record, then the state; a streaming query id without a ledger shows its one writer's ledger.

    async def go(client: S2) -> tuple[str, list[tuple[Doc, LedgerState | None]], int]:
        writer_id = await _writer_of(client, args.writer_id, cfg.basin)
        return (writer_id, *await _history(client.basin(cfg.basin), writer_id))

    writer_id, entries, tail = run_io(cfg, None, go)
    alias = [f"{args.writer_id!r} is the streaming query id of writer {writer_id!r}"]
    name = ledger_stream_name(writer_id)
    head = f"ledger {name!r} in basin {cfg.basin!r}: {len(entries)} records, tail {tail}"
    last = entries[-1][1] if entries else None
    summary = [] if last is None else [_summary(writer_id, last)]
    lines = [*alias[: writer_id != args.writer_id], head, *(_show_line(d, st) for d, st in entries), *summary]
    return Output(lines, [doc for doc, _ in entries])


async def _writer_of(client: S2, name: str, basin_name: str) -> str:
    """``name`` when it has a ledger, else the one writer whose ledger holds streaming query ``name``'s
    batches."""
    basin = client.basin(basin_name)
    stream = ledger_stream_name(name)
    if [i async for i in basin.list_all_streams(prefix=stream) if i.name == stream]:
        return name  # its records are shown (an unreadable one as such)
    ids = current_ledgers_of(await peek_all(basin, skip_unreadable=True), name)
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
        f"writer {name!r} has no ledger in basin {basin_name!r} (stream {stream!r} does not exist), and no "
        "writer of a streaming query with that id does: it never ran exactly-once here. The writer id is the "
        "S2Writer's writer_id (s2.writer-id), by default the streaming query id; `s2-sink ledger list` shows "
        "the basin's writers",
        NOT_FOUND,
    )


def _on_ledger(
    cfg: S2Config, writer_id: str, work: Callable[[S2Basin, Ledger], Awaitable[str]], missing: str
) -> Output:
    """``work`` on the writer's ledger, which must exist: getting its config never creates it (a check_tail
    would, in a basin that creates streams on read)."""
    name = ledger_stream_name(writer_id)

    async def go(client: S2) -> str:
        basin = client.basin(cfg.basin)
        await basin.get_stream_config(name)
        return await work(basin, Ledger(basin, writer_id, patience=PATIENCE))

    try:
        return Output([run_io(cfg, name, go)])
    except CliFailure as exc:
        if exc.missing == "stream":
            raise CliFailure(
                f"writer {writer_id!r} has no ledger in basin {cfg.basin!r} (stream {name!r} does not "
                f"exist){missing}",
                NOT_FOUND,
            ) from exc
        raise


def reset(args: argparse.Namespace, cfg: S2Config) -> Output:
    name = ledger_stream_name(args.writer_id)

    async def work(_: S2Basin, ledger: Ledger) -> str:
        before = await ledger.load()
        if before.kind == "none":
            return f"ledger {name!r} is empty: there is nothing to reset"
        if not args.yes:
            raise CliFailure(
                f"not resetting the ledger of writer {args.writer_id!r} (last record: {before.kind} of batch "
                f"{before.committed}, epoch {before.epoch}) without --yes. {RESET_HELP}",
                USAGE,
            )
        run = f"reset-{uuid.uuid4().hex}"
        await ledger.append(
            dataclasses.replace(before, kind="commit", committed=-1, run=run, query_id=None, scope="batch")
        )
        return (
            f"ledger {name!r} reset: the next run under writer id {args.writer_id!r} may start at any batch"
        )

    return _on_ledger(cfg, args.writer_id, work, ": there is nothing to reset")


def forget(args: argparse.Namespace, cfg: S2Config) -> Output:
    writer_id, stream = args.writer_id, args.stream

    async def work(basin: S2Basin, ledger: Ledger) -> str:
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
        await ledger.append(
            dataclasses.replace(state, kind="commit", scope="run", ends=ends, announces=False, intent=None)
        )
        return (
            f"ledger {ledger.name!r}: forgot the end {end} of stream {stream!r} (now ending at {tail}); the "
            "next run under this writer id reads it back from its start"
        )

    return _on_ledger(cfg, writer_id, work, f", or stream {stream!r} does not exist")
