"""``s2-sink ledger list``, ``streams list|describe``, fences by writer id, ISO 8601 times in text (raw
milliseconds with ``--json``), and a reader that closes the pipe early, against the session's lite server."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime

from s2_sdk import AppendInput, Record

from s2_sink._exactly_once.fencing import Token, fence_if_older, writer_hash
from s2_sink._exactly_once.ledger import ledger_stream_name
from s2_sink.lite import LiteServer
from tests.cli.test_cli import append, cli, config, json_lines, sdk, write_exactly_once

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def iso(ms: int) -> str:
    """What the CLI prints for a time of `ms` milliseconds since the epoch."""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def test_ledger_list_shows_each_writer_with_its_last_batch_and_time(lite: LiteServer, basin: str) -> None:
    """`ledger list` names every writer with a ledger in the basin, its last committed batch and the time of
    its last record (ISO 8601 UTC in text, milliseconds with --json); other streams are not ledgers."""
    before = int(time.time() * 1000)
    cfg = config(lite, basin)
    write_exactly_once(cfg, "orders-job", [[b"a"], [b"b"], [b"c"]])
    write_exactly_once(cfg.replace(stream="other"), "audit-job", [[b"x"]], query_id="query-2")
    append(lite, basin, "plain", [AppendInput(records=[Record(b"not a ledger")])])
    after = int(time.time() * 1000)

    out = cli(lite.endpoint, "ledger", "list", "--basin", basin, "--json")
    assert out.returncode == 0, out.stderr
    docs = json_lines(out.stdout)
    assert [(d["writer_id"], d["kind"], d["epoch"], d["committed"], d["query_id"]) for d in docs] == [
        ("audit-job", "commit", 1, 0, "query-2"),
        ("orders-job", "commit", 1, 2, "query-1"),
    ]
    assert [d["writer_hash"] for d in docs] == [writer_hash("audit-job"), writer_hash("orders-job")]
    assert all(before <= d["timestamp"] <= after + 1000 for d in docs), docs
    assert docs[1]["stream"] == ledger_stream_name("orders-job")

    text = cli(lite.endpoint, "ledger", "list", "--basin", basin)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == f"basin {basin!r}: 2 exactly-once ledgers (times in UTC)"
    orders = lines[2]
    assert orders.startswith(f"orders-job  hash {writer_hash('orders-job')}  epoch 1  batch 2 committed  ")
    assert f"last record {iso(docs[1]['timestamp'])}" in orders
    assert str(docs[1]["timestamp"]) not in text.stdout  # no raw milliseconds for people


def test_ledger_list_of_a_basin_without_ledgers(lite: LiteServer, basin: str) -> None:
    """A basin where nothing ran exactly-once lists no ledger, and creates none."""
    out = cli(lite.endpoint, "ledger", "list", "--basin", basin)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [f"basin {basin!r}: 0 exactly-once ledgers (times in UTC)"]


def test_streams_list_names_streams_and_what_the_bookkeeping_ones_are(lite: LiteServer, basin: str) -> None:
    """`streams list` prints every stream with its creation time (ISO in text, ms with --json), says which
    streams are a writer's ledger or a partition's sign-in register, and --prefix narrows the list."""
    write_exactly_once(config(lite, basin), "job", [[b"x"]])
    append(lite, basin, "events-2", [AppendInput(records=[Record(b"y")])])

    docs = json_lines(cli(lite.endpoint, "streams", "list", "--basin", basin, "--json").stdout)
    names = [d["name"] for d in docs]
    assert names == ["_s2sink/ledger/job", "_s2sink/register/job/0", "events", "events-2"]
    assert all(isinstance(d["created_at"], int) and d["created_at"] > 0 for d in docs)

    text = cli(lite.endpoint, "streams", "list", "--basin", basin)
    assert text.returncode == 0, text.stderr
    ledger_line = next(line for line in text.stdout.splitlines() if line.startswith("_s2sink/ledger/job"))
    assert ledger_line.endswith("exactly-once ledger of writer 'job'")
    assert ISO.search(ledger_line)
    register_line = next(line for line in text.stdout.splitlines() if line.startswith("_s2sink/register/"))
    assert register_line.endswith("exactly-once sign-ins of partition 0 of writer 'job'")

    only = cli(lite.endpoint, "streams", "list", "--basin", basin, "--prefix", "events", "--json")
    assert [d["name"] for d in json_lines(only.stdout)] == ["events", "events-2"]


def test_streams_describe_shows_tail_config_and_the_fence_by_writer_id(lite: LiteServer, basin: str) -> None:
    """`streams describe` shows the tail, the retention and the fencing token with the writer id it belongs
    to (found through the writer's ledger: the token only carries a hash), and changes nothing."""
    ends = write_exactly_once(config(lite, basin), "orders-job", [[b"a", b"b"]])
    h = writer_hash("orders-job")

    out = cli(lite.endpoint, "streams", "describe", "events", "--basin", basin, "--json")
    assert out.returncode == 0, out.stderr
    (doc,) = json_lines(out.stdout)
    assert doc["tail"]["seq_num"] == ends["events"] == 3
    assert doc["fencing_token"] == f"s2sink:{h}:1.0~"
    assert doc["fence"] == {"writer_hash": h, "writer_ids": ["orders-job"], "epoch": 1, "generation": 0}
    assert doc["config"]["retention_policy"] == 604800

    text = cli(lite.endpoint, "streams", "describe", "events", "--basin", basin)
    assert text.returncode == 0, text.stderr
    assert (
        f"fencing token    's2sink:{h}:1.0~' (exactly-once writer 'orders-job' (hash {h}), epoch 1, "
        "generation 0)"
    ) in text.stdout
    assert f"last record at {iso(doc['tail']['timestamp'])}" in text.stdout
    assert "retention        604800 s (7 days)" in text.stdout
    again = json_lines(cli(lite.endpoint, "streams", "describe", "events", "--basin", basin, "--json").stdout)
    assert again[0]["tail"] == doc["tail"]  # describing appended nothing


def test_streams_describe_of_a_missing_stream_is_exit_3_and_creates_nothing(
    lite: LiteServer, basin: str
) -> None:
    """A stream that does not exist is exit 3, even in a basin that creates streams on append."""
    out = cli(lite.endpoint, "streams", "describe", "typo", "--basin", basin)
    assert out.returncode == 3
    assert f"stream 'typo' does not exist in basin {basin!r}" in out.stderr
    names = [
        d["name"]
        for d in json_lines(cli(lite.endpoint, "streams", "list", "--basin", basin, "--json").stdout)
    ]
    assert "typo" not in names


def test_fences_clear_names_the_writer_id_when_a_ledger_has_it(lite: LiteServer, basin: str) -> None:
    """A token of a writer that has a ledger in the basin is shown with that writer id, not only its hash."""
    write_exactly_once(config(lite, basin), "orders-job", [[b"a"]])
    h = writer_hash("orders-job")

    async def bump() -> None:
        async with sdk(lite) as s2:
            await fence_if_older(s2.basin(basin).stream("events"), Token(4, 2, h))

    asyncio.run(bump())
    out = cli(lite.endpoint, "fences", "clear", "events", "--basin", basin)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (
        f"stream 'events': cleared fencing token 's2sink:{h}:4.2~' "
        f"(exactly-once writer 'orders-job' (hash {h}), epoch 4, generation 2)"
    )


def test_tail_times_are_iso_in_text_and_milliseconds_with_json(lite: LiteServer, basin: str) -> None:
    """`tail` prints each record's time as ISO 8601 UTC; `--json` keeps S2's milliseconds."""
    append(lite, basin, "t", [AppendInput(records=[Record(b'{"n":1}', timestamp=1767607200412)])])
    raw = json_lines(cli(lite.endpoint, "tail", "t", "--basin", basin, "--json").stdout)
    text = json_lines(cli(lite.endpoint, "tail", "t", "--basin", basin).stdout)
    assert raw == [{"seq_num": 0, "timestamp": 1767607200412, "value": {"n": 1}}]
    assert text == [{"seq_num": 0, "timestamp": "2026-01-05T10:00:00.412Z", "value": {"n": 1}}]


def test_tail_into_a_pipe_closed_early_exits_0_quietly(lite: LiteServer, basin: str) -> None:
    """`s2-sink tail ... | head -1` in a real shell: head exits after one line while tail still writes (more
    than a pipe holds); tail then exits 0 with nothing on stderr, not 1 blaming the server."""
    pad = b'{"pad":"' + b"x" * 2000 + b'"}'
    append(lite, basin, "big", [AppendInput(records=[Record(pad)] * 500) for _ in range(3)])
    script = (
        f"{sys.executable} -m s2_sink tail big -n 1500 --basin {basin} 2>tail.err | head -1 >/dev/null; "
        'echo "status=${PIPESTATUS[0]}"; cat tail.err'
    )
    env = {**os.environ, "S2_ACCOUNT_ENDPOINT": lite.endpoint, "S2_BASIN_ENDPOINT": lite.endpoint}
    out = subprocess.run(
        ["bash", "-c", f'cd "$(mktemp -d)" && {script}'],
        env={**env, "S2_ACCESS_TOKEN": "test"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.stdout.splitlines() == ["status=0"], out.stdout + out.stderr
