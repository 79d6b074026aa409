"""``s2-sink streams list`` / ``streams describe STREAM``. Only reads: ``describe`` learns the fencing token
from the refusal of an append conditional on a token nobody uses (`read_fence`), and never creates a stream.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from s2_sdk import S2, StreamConfig

from s2_sink._exactly_once.fencing import Token
from s2_sink._exactly_once.ledger import LEDGER_PREFIX
from s2_sink._exactly_once.sign_in_registers import REGISTER_PREFIX
from s2_sink.cli._command import config_from, iso_ms, print_json, run_io
from s2_sink.cli._fences_cmd import read_fence
from s2_sink.cli._writers import describe_token, writers_by_hash

__all__ = ["describe", "list_streams"]


def _ms(when: datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def _role(name: str) -> str:
    if name.startswith(LEDGER_PREFIX):
        return f"exactly-once ledger of writer {name[len(LEDGER_PREFIX) :]!r}"
    if name.startswith(REGISTER_PREFIX):
        writer, _, partition = name[len(REGISTER_PREFIX) :].rpartition("/")
        return f"exactly-once sign-ins of partition {partition} of writer {writer!r}"
    if name.startswith("_s2sink/"):
        return "exactly-once bookkeeping"
    return ""


def list_streams(args: argparse.Namespace) -> int:
    cfg = config_from(args)

    async def listing(client: S2) -> list[tuple[str, int | None]]:
        found = client.basin(cfg.basin).list_all_streams(prefix=args.prefix)
        return [(i.name, _ms(i.created_at)) async for i in found]

    streams = run_io(cfg, None, listing)
    if args.json:
        for name, created in streams:
            print_json({"name": name, "created_at": created})
        return 0
    which = f" starting with {args.prefix!r}" if args.prefix else ""
    print(f"basin {cfg.basin!r}: {len(streams)} streams{which}")
    width = max((len(name) for name, _ in streams), default=0)
    for name, created in streams:
        print(f"{name:<{width}}  created {iso_ms(created)}  {_role(name)}".rstrip())
    return 0


async def _describe(client: S2, basin_name: str, name: str) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """The stream's ``--json`` document, and the writer ids of its fencing token's writer hash."""
    basin = client.basin(basin_name)
    config = await basin.get_stream_config(name)  # first: a missing stream is a 404, and nothing is created
    created = None
    async for info in basin.list_all_streams(prefix=name):
        if info.name == name:
            created = _ms(info.created_at)
    stream = basin.stream(name)
    tail = await stream.check_tail()
    token = await read_fence(stream)
    ours = Token.parse(token)
    writers = await writers_by_hash(basin) if ours is not None else {}
    fence = None
    if ours is not None:
        ids = writers.get(ours.writer, [])
        fence = {"writer_hash": ours.writer, "writer_ids": ids, "epoch": ours.epoch, "generation": ours.gen}
    doc = {
        "name": name,
        "created_at": created,
        "tail": {"seq_num": tail.seq_num, "timestamp": tail.timestamp},
        "fencing_token": token,
        "fence": fence,
        "config": _config_doc(config),
    }
    return doc, writers


def _config_doc(config: StreamConfig) -> dict[str, Any]:
    ts = config.timestamping
    return {
        "storage_class": config.storage_class,
        "retention_policy": config.retention_policy,
        "timestamping_mode": None if ts is None or ts.mode is None else ts.mode.value,
        "timestamping_uncapped": None if ts is None else ts.uncapped,
        "delete_on_empty_min_age": config.delete_on_empty_min_age,
    }


def _retention(policy: int | str | None) -> str:
    if policy is None:
        return "the basin's default"
    if policy == "infinite":
        return "infinite"
    seconds = int(policy)
    return f"{seconds} s ({seconds / 86400:g} days)"


def describe(args: argparse.Namespace) -> int:
    cfg = config_from(args)

    d, writers = run_io(cfg, args.stream, lambda client: _describe(client, cfg.basin, args.stream))
    if args.json:
        print_json(d)
        return 0
    config, tail = d["config"], d["tail"]
    fence = describe_token(d["fencing_token"], writers) if d["fencing_token"] else "none"
    role = _role(d["name"])
    print(f"stream {d['name']!r} in basin {cfg.basin!r}" + (f" ({role})" if role else ""))
    mode = config["timestamping_mode"] or "default (client-prefer)"
    age = config["delete_on_empty_min_age"]
    rows = [
        ("created", iso_ms(d["created_at"])),
        ("tail", f"{tail['seq_num']} (next seq_num); last record at {iso_ms(tail['timestamp'])}"),
        ("fencing token", fence),
        ("storage class", config["storage_class"] or "the basin's default"),
        ("retention", _retention(config["retention_policy"])),
        ("timestamping", mode + (" uncapped" if config["timestamping_uncapped"] else "")),
        ("delete if empty", "never" if not age else f"after {age} s"),
    ]
    for label, value in rows:
        print(f"  {label:<16} {value}")
    return 0
