"""``s2-sink streams list|describe``, ``fences clear`` with each fencing token's writer named, and ``tail``.

A token names its writer by an 8-hex-digit hash of the writer id only (tokens are at most 36 bytes): hashing
each ledger's writer id gives the id back. ``describe`` only reads: it learns the token from the refusal of an
append conditional on a token nobody uses (`read_fence`), and never creates a stream. ``clear`` is conditional
on the token found, so what it reports cleared is exactly what it cleared; why that never breaks a running
writer: docs/exactly-once.md, *Fencing tokens*. ``tail``'s output: docs/operations.md, *Tail a stream*.
"""

from __future__ import annotations

import argparse
import base64
import logging
import sys
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

import orjson
from s2_sdk import S2, AppendInput, CommandRecord, FencingTokenMismatchError, S2Error, SeqNum

from s2_sink import encoders
from s2_sink._exactly_once.fencing import Token, writer_hash
from s2_sink._exactly_once.ledger import LEDGER_PREFIX
from s2_sink._exactly_once.readback import read_span
from s2_sink._exactly_once.sign_in_registers import REGISTER_PREFIX
from s2_sink.cli._command import PATIENCE, USAGE, CliFailure, Output, iso_ms, run_io
from s2_sink.cli._ledger_cmd import writer_ids
from s2_sink.config import S2Config
from s2_sink.errors import EncodeError

if TYPE_CHECKING:
    from s2_sdk import S2Basin, S2Stream, SequencedRecord, StreamConfig, StreamPosition

__all__ = ["CLEAR_HELP", "clear_fence", "clear_fences", "describe", "list_streams", "read_fence", "tail"]

log = logging.getLogger(__name__)

CLEAR_HELP: Final = (
    "Remove the fencing token of each STREAM (S2 accepts appends without a token either way; appends "
    "that carry a token must match it). Use it when a FencedError names a token whose writer is gone for "
    "good, or after deleting a ledger. A running exactly-once writer is not harmed: it fences the stream "
    "again on its next append."
)

# A token no writer uses: the first conditional clear is refused and the 412 shows the current token.
_PROBE: Final = "s2-sink-cli:probe"
_ATTEMPTS: Final = 5


async def _writers_by_hash(basin: S2Basin) -> dict[str, list[str]]:
    """Writer hash -> the writer ids with a ledger that have it. Best effort: when the ledgers cannot be
    listed, tokens are shown by their hash."""
    found: dict[str, list[str]] = {}
    try:
        ids = await writer_ids(basin)
    except S2Error as exc:
        log.debug("cannot list the ledgers to name fencing tokens' writers: %s", exc)
        return found
    for writer_id in ids:
        found.setdefault(writer_hash(writer_id), []).append(writer_id)
    return found


def _describe_token(token: str, writers: dict[str, list[str]]) -> str:
    ours = Token.parse(token)
    if ours is None:
        return f"{token!r} (not an s2_sink token)"
    ids = writers.get(ours.writer, [])
    if ids:
        who = f"exactly-once writer {' or '.join(map(repr, ids))} (hash {ours.writer})"
    else:
        who = f"exactly-once writer with hash {ours.writer}, whose writer id has no ledger in this basin"
    return f"{token!r} ({who}, epoch {ours.epoch}, generation {ours.gen})"


def _ms(when: datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def _role(name: str) -> str:
    if name.startswith(LEDGER_PREFIX):
        return f"exactly-once ledger of writer {name[len(LEDGER_PREFIX) :]!r}"
    if name.startswith(REGISTER_PREFIX):
        writer, _, partition = name[len(REGISTER_PREFIX) :].rpartition("/")
        return f"exactly-once sign-ins of partition {partition} of writer {writer!r}"
    return "exactly-once bookkeeping" if name.startswith("_s2sink/") else ""


def list_streams(args: argparse.Namespace, cfg: S2Config) -> Output:

    async def listing(client: S2) -> list[dict[str, Any]]:
        found = client.basin(cfg.basin).list_all_streams(prefix=args.prefix)
        return [{"name": i.name, "created_at": _ms(i.created_at)} async for i in found]

    docs = run_io(cfg, None, listing)
    which = f" starting with {args.prefix!r}" if args.prefix else ""
    width = max((len(d["name"]) for d in docs), default=0)
    lines = [
        f"{d['name']:<{width}}  created {iso_ms(d['created_at'])}  {_role(d['name'])}".rstrip() for d in docs
    ]
    return Output([f"basin {cfg.basin!r}: {len(docs)} streams{which}", *lines], docs)


async def read_fence(stream: S2Stream) -> str:
    """The stream's fencing token (``""``: none), unchanged: an append conditional on a token nobody uses is
    refused, naming the current token (were the probe the current one, it would only fence to it again)."""
    try:
        await stream.append(AppendInput(records=[CommandRecord.fence(_PROBE)], fencing_token=_PROBE))
    except FencingTokenMismatchError as exc:
        return exc.expected_fencing_token
    return _PROBE


def _retention(policy: int | str | None) -> str:
    if policy is None or policy == "infinite":
        return "the basin's default" if policy is None else "infinite"
    return f"{int(policy)} s ({int(policy) / 86400:g} days)"


def describe(args: argparse.Namespace, cfg: S2Config) -> Output:
    name = args.stream

    async def go(
        client: S2,
    ) -> tuple[StreamConfig, list[int | None], StreamPosition, str, dict[str, list[str]]]:
        basin = client.basin(cfg.basin)
        config = await basin.get_stream_config(
            name
        )  # first: a missing stream is a 404, and nothing is created
        created = [_ms(i.created_at) async for i in basin.list_all_streams(prefix=name) if i.name == name]
        tail = await basin.stream(name).check_tail()
        token = await read_fence(basin.stream(name))
        writers = await _writers_by_hash(basin) if Token.parse(token) is not None else {}
        return config, created, tail, token, writers

    config, created, tail, token, writers = run_io(cfg, name, go)
    ours, ts, age = Token.parse(token), config.timestamping, config.delete_on_empty_min_age
    mode = None if ts is None or ts.mode is None else ts.mode.value
    fence = None
    if ours is not None:
        ids = writers.get(ours.writer, [])
        fence = {"writer_hash": ours.writer, "writer_ids": ids, "epoch": ours.epoch, "generation": ours.gen}
    doc = {
        "name": name,
        "created_at": created[-1] if created else None,
        "tail": {"seq_num": tail.seq_num, "timestamp": tail.timestamp},
        "fencing_token": token,
        "fence": fence,
        "config": {
            "storage_class": config.storage_class,
            "retention_policy": config.retention_policy,
            "timestamping_mode": mode,
            "timestamping_uncapped": None if ts is None else ts.uncapped,
            "delete_on_empty_min_age": age,
        },
    }
    rows = [
        ("created", iso_ms(doc["created_at"])),
        ("tail", f"{tail.seq_num} (next seq_num); last record at {iso_ms(tail.timestamp)}"),
        ("fencing token", _describe_token(token, writers) if token else "none"),
        ("storage class", config.storage_class or "the basin's default"),
        ("retention", _retention(config.retention_policy)),
        ("timestamping", (mode or "default (client-prefer)") + (" uncapped" if ts and ts.uncapped else "")),
        ("delete if empty", "never" if not age else f"after {age} s"),
    ]
    role = f" ({_role(name)})" if _role(name) else ""
    head = f"stream {name!r} in basin {cfg.basin!r}{role}"
    return Output([head, *(f"  {label:<16} {value}" for label, value in rows)], [doc])


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


def clear_fences(args: argparse.Namespace, cfg: S2Config) -> Output:
    # In order, each line printed as it is done, stopping at the first failure.
    writers = run_io(cfg, None, lambda client: _writers_by_hash(client.basin(cfg.basin)))
    for name in args.streams:

        async def go(client: S2, name: str = name) -> str:
            basin = client.basin(cfg.basin)
            # A missing stream is an error, even in a basin that creates streams on append or on read
            # (where a check_tail would create it): getting its config never creates it.
            await basin.get_stream_config(name)
            return await clear_fence(basin.stream(name))

        was = run_io(cfg, name, go)
        done = f"cleared fencing token {_describe_token(was, writers)}" if was else "had no fencing token"
        print(f"stream {name!r}: {done}", flush=True)
    return Output()


def _text_or_b64(data: bytes) -> str:
    try:
        return data.decode()
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(data).decode()


def _doc(record: SequencedRecord, fmt: str, raw: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "seq_num": record.seq_num,
        "timestamp": record.timestamp if raw else iso_ms(record.timestamp),
    }
    if fmt == "upsert":
        try:
            (change,) = encoders.decode_upsert([record])
        except EncodeError as exc:
            raise CliFailure(
                f"record {record.seq_num} is not an upsert record ({exc}); print it with --format insert"
            ) from exc
        return {**doc, "action": change.action, "key": change.key, "value": change.value}
    try:
        doc["value"] = orjson.loads(record.body)
    except orjson.JSONDecodeError:
        doc["text"] = _text_or_b64(record.body)
    if record.headers:
        doc["headers"] = [[_text_or_b64(k), _text_or_b64(v)] for k, v in record.headers]
    return doc


def _emit(records: list[SequencedRecord], fmt: str, raw: bool) -> None:
    for record in records:  # each printed once decoded: the ones before a record that fails to decode stay
        Output(docs=[_doc(record, fmt, raw)]).print(as_json=True)
    sys.stdout.flush()


async def _last_records(stream: S2Stream, count: int, end: int) -> list[SequencedRecord]:
    """The last ``count`` records before ``end``, stepping further back past command records."""
    found: list[SequencedRecord] = []
    start = end
    while len(found) < count and start > 0:
        earlier = max(0, start - (count - len(found)))
        records = read_span(stream, earlier, start, patience=PATIENCE)
        span = [r async for r in records if not r.is_command_record()]
        found = span + found
        start = earlier
    return found[-count:] if count else []


async def _print_tail(stream: S2Stream, count: int, fmt: str, follow: bool, raw: bool) -> None:
    end = (await stream.check_tail()).seq_num
    _emit(await _last_records(stream, count, end), fmt, raw)
    if not follow:
        return
    async with stream.read_session(start=SeqNum(end), ignore_command_records=True) as session:
        async for batch in session:
            _emit(batch.records, fmt, raw)


def tail(args: argparse.Namespace, cfg: S2Config) -> Output:
    if args.n < 0:
        raise CliFailure(f"-n must be 0 or more, got {args.n}", USAGE)
    if args.format == "upsert":
        try:  # the upsert decoder needs pyspark (an extra): say so before reading anything
            encoders.decode_upsert  # noqa: B018
        except ModuleNotFoundError as exc:
            raise CliFailure(str(exc), USAGE) from exc
    stream = args.stream
    run_io(
        cfg,
        stream,
        lambda c: _print_tail(c.basin(cfg.basin).stream(stream), args.n, args.format, args.follow, args.json),
    )
    return Output()
