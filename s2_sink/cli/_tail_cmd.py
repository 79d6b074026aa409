"""``s2-sink tail STREAM``: a stream's last records decoded, one JSON object per line: ``--format insert`` the
body as JSON, else text, else base64, with the headers; ``--format upsert`` the Flink connector's changelog as
key, action and value. Command records are not printed.
"""

from __future__ import annotations

import argparse
import base64
import sys
from typing import Any

import orjson
from s2_sdk import S2Stream, SeqNum, SequencedRecord

from s2_sink import encoders
from s2_sink._exactly_once.readback import read_span
from s2_sink.cli._command import PATIENCE, USAGE, CliFailure, Output, iso_ms, run_io
from s2_sink.config import S2Config
from s2_sink.errors import EncodeError

__all__ = ["tail"]


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
    Output(docs=[_doc(record, fmt, raw) for record in records]).print(as_json=True)
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
    """print a stream's last records decoded, one JSON object per line"""
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
