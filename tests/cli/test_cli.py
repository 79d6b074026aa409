"""The ``s2-sink`` command against the session's lite server: through its ``main`` in this process (its
arguments, environment, stdout, stderr and exit code, as a user sees them), and in real processes where the
process is what is tested (the console script, ``python -m s2_sink.lite``, ``tail --follow`` stopped by
SIGINT, a reader closing the pipe)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pyarrow as pa
import pytest
from s2_sdk import S2, AppendInput, CommandRecord, Endpoints, FencingTokenMismatchError, Record, S2ClientError

from s2_sink._exactly_once.coordinator import Coordinator
from s2_sink._exactly_once.fencing import Token, fence_if_older, writer_hash
from s2_sink._exactly_once.ledger import ledger_stream_name
from s2_sink._exactly_once.tags import TAG_RESERVE_BYTES
from s2_sink._transport.retry import Retrying
from s2_sink._write.driver.routing import Routing
from s2_sink._write.spec import WriteSpec
from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.cli import EXIT_CODES, main
from s2_sink.cli._command import PATIENCE
from s2_sink.config import S2Config
from s2_sink.encoders import ACTION_HEADER, KEY_HEADER
from s2_sink.lite import LiteServer
from s2_sink.testing import fresh_basin, unique_basin_name
from s2_sink.writer import S2Writer
from tests.sim._scenario import Row
from tests.unit.exactly_once._writer import facts, write_batch

HEADERS_TYPE = pa.list_(pa.struct([pa.field("name", pa.binary()), pa.field("value", pa.binary())]))


def cli(endpoint: str, *args: str, token: str = "test") -> subprocess.CompletedProcess[str]:
    """``s2-sink ARGS`` with the lite server's exports in the environment: the command's ``main`` run in this
    process (a subprocess would add only an interpreter start), its stdout, stderr and exit code captured."""
    env = {"S2_ACCOUNT_ENDPOINT": endpoint, "S2_BASIN_ENDPOINT": endpoint, "S2_ACCESS_TOKEN": token}
    out, err = io.StringIO(), io.StringIO()
    with patch.dict(os.environ, env), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse: --help, or arguments it refuses
            code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return subprocess.CompletedProcess(["s2-sink", *args], code, out.getvalue(), err.getvalue())


def config(lite: LiteServer, basin: str) -> S2Config:
    return S2Config(
        basin=basin,
        stream="events",
        access_token="test",
        account_endpoint=lite.endpoint,
        basin_endpoint=lite.endpoint,
    )


def sdk(lite: LiteServer) -> S2:
    return S2("test", endpoints=Endpoints(account=lite.endpoint, basin=lite.endpoint))


def append(lite: LiteServer, basin: str, stream: str, inputs: list[AppendInput]) -> None:
    async def go() -> None:
        async with sdk(lite) as s2:
            for inp in inputs:
                await s2.basin(basin).stream(stream).append(inp)

    asyncio.run(go())


def frame(bodies: list[bytes]) -> pa.RecordBatch:
    """A record frame (the encoders' output) of plain bodies."""
    n = len(bodies)
    return pa.RecordBatch.from_pydict(
        {
            "_s2_body": pa.array(bodies, pa.binary()),
            "_s2_headers": pa.array([None] * n, HEADERS_TYPE),
            "_s2_timestamp": pa.array([None] * n, pa.int64()),
            "_s2_key": pa.array([None] * n, pa.binary()),
            "_s2_error": pa.array([None] * n, pa.string()),
        }
    )


def write_exactly_once(
    cfg: S2Config, writer_id: str, batches: list[list[bytes]], query_id: str = "query-1"
) -> dict[str, int]:
    """Write micro-batches the way `S2Writer` does exactly-once, without Spark: the coordinator's plan,
    the partition writer, the ledger commit. Returns the stream ends of the last commit."""
    routing = Routing.build(stream=cfg.stream, stream_column=None, shards=None)
    shape = WriteSpec.build(cfg, routing).shape(None)  # what the writer records: its routing tells it apart
    coord = Coordinator(cfg, writer_id, query_id=query_id, static_streams=[str(cfg.stream)], shape=shape)
    ends: dict[str, int] = {}
    for batch_id, bodies in enumerate(batches):
        bp = coord.begin_batch(batch_id)
        assert bp is not None
        eo = bp.cfg  # with the NO_SIDE_EFFECTS append retry policy
        plan = WritePlan(
            cfg=eo,
            batch_id=batch_id,
            stream=cfg.stream,
            fencing_token=bp.token,
            chunk_tagger=bp.tagger,
            chunk_tag_reserve=TAG_RESERVE_BYTES,
            recovery=bp.dedupe,
            resend_ambiguous=False,
            fence_keeper=bp.keeper,
        )
        result = write_partition(plan, [frame(bodies)], PartitionContext(batch_id, 0, 0, 0, 0))
        ends = {r["stream"]: r["end_seq"] for r in result.to_pylist() if r["stream"] is not None}
        coord.commit_batch(batch_id, ends)
    return ends


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


# -- ledger ---------------------------------------------------------------------------------------------


def test_ledger_show_decodes_a_ledger_written_by_an_exactly_once_run(lite: LiteServer, basin: str) -> None:
    """`ledger show` prints every record of a ledger that the exactly-once write path wrote: the run's open
    (epoch 1), and per micro-batch its intent and its commit with the stream ends the writer acknowledged."""
    ends = write_exactly_once(config(lite, basin), "orders-job", [[b'{"a":1}'] * 3, [b'{"a":2}'] * 4])
    assert ends == {"events": 8}  # the run's fence command record, then 3 + 4 records

    shown = cli(lite.endpoint, "ledger", "show", "orders-job", "--basin", basin, "--json")
    assert shown.returncode == 0, shown.stderr
    records = json_lines(shown.stdout)
    assert [(r["kind"], r["epoch"], r["batch"], r.get("intent"), r["scope"]) for r in records] == [
        ("open", 1, -1, None, "run"),
        ("intent", 1, -1, 0, "run"),
        ("commit", 1, 0, None, "run"),
        ("intent", 1, 0, 1, "run"),
        ("commit", 1, 1, None, "run"),
    ]
    assert [r["ends"] for r in records] == [{}, {}, {"events": 4}, {"events": 4}, {"events": 8}]
    assert {r["query_id"] for r in records} == {"query-1"}
    assert [r["seq_num"] for r in records] == [0, 1, 2, 3, 4]

    text = cli(lite.endpoint, "ledger", "show", "orders-job", "--basin", basin)
    assert text.returncode == 0, text.stderr
    assert "ledger '_s2sink/ledger/orders-job'" in text.stdout
    assert "ends: events=8" in text.stdout
    assert "batch 1 committed; the next run opens epoch 2 and writes the next batch" in text.stdout


def test_ledger_show_missing_ledger_and_missing_basin_are_told_apart(lite: LiteServer, basin: str) -> None:
    """A writer id without a ledger and a basin that does not exist both exit 3, each with its own words
    and no traceback."""
    no_ledger = cli(lite.endpoint, "ledger", "show", "never-ran", "--basin", basin)
    assert no_ledger.returncode == 3
    assert f"writer 'never-ran' has no ledger in basin {basin!r}" in no_ledger.stderr
    assert "`s2-sink ledger list` shows the basin's writers" in no_ledger.stderr
    assert "Traceback" not in no_ledger.stderr

    missing = unique_basin_name()
    no_basin = cli(lite.endpoint, "ledger", "show", "w", "--basin", missing)
    assert no_basin.returncode == 3
    assert f"basin {missing!r} does not exist at {lite.endpoint}" in no_basin.stderr
    assert f"s2-sink-lite --basin {missing}" in no_basin.stderr


def test_ledger_show_finds_a_querys_writer_by_the_query_id(lite: LiteServer, basin: str) -> None:
    """`ledger show QUERY_ID` where the query's writer has an explicit writer_id shows that writer's ledger
    (before: exit 3, no ledger named by the query id); a query of several writers lists them (exit 3); a
    ledger taken over by another writer id says which one goes on."""
    cfg = config(lite, basin)
    rows = [Row(b'{"a":1}')]
    orders = S2Writer(cfg, None, writer_id="orders-job", preflight=False)
    assert write_batch(orders, 0, [rows], facts(query_id="query-1")) == "written"
    shown = cli(lite.endpoint, "ledger", "show", "query-1", "--basin", basin)
    assert shown.returncode == 0, shown.stderr
    assert "'query-1' is the streaming query id of writer 'orders-job'" in shown.stdout
    assert "ledger '_s2sink/ledger/orders-job'" in shown.stdout
    assert "config: stream=events on_error=fail dlq=-" in shown.stdout

    audit = S2Writer(cfg.replace(stream="audit"), None, writer_id="audit-job", create_streams=True)
    assert write_batch(audit, 0, [rows], facts(query_id="query-1")) == "written"
    both = cli(lite.endpoint, "ledger", "show", "query-1", "--basin", basin)
    assert both.returncode == 3
    assert "'query-1' is the streaming query id of several exactly-once writers (audit-job, orders-job)" in (
        both.stderr
    )

    renamed = S2Writer(cfg, None, writer_id="orders-v2", preflight=False)
    assert write_batch(renamed, 1, [rows], facts("run-2", query_id="query-1")) == "written"
    moved = cli(lite.endpoint, "ledger", "show", "orders-job", "--basin", basin)
    assert moved.returncode == 0, moved.stderr
    assert "moved_to=orders-v2" in moved.stdout
    assert "writer 'orders-job' was taken over by writer 'orders-v2'" in moved.stdout
    assert "`s2-sink ledger show orders-v2`" in moved.stdout


def test_ledger_reset_needs_yes_then_lets_a_new_query_start_at_batch_zero(
    lite: LiteServer, basin: str
) -> None:
    """Without --yes nothing changes (exit 2, the help says what a reset means); with it, the ledger forgets
    its committed batches but keeps its epoch, so a query whose checkpoint was deleted starts again at batch
    0 under the same writer id, with a higher epoch, instead of failing with WriterConflictError."""
    cfg = config(lite, basin)
    write_exactly_once(cfg, "job", [[b"x"], [b"y"], [b"z"]])

    refused = cli(lite.endpoint, "ledger", "reset", "job", "--basin", basin)
    assert refused.returncode == 2
    assert "without --yes" in refused.stderr
    assert "exactly-once no longer covers batches from before the reset" in refused.stderr
    assert (
        len(json_lines(cli(lite.endpoint, "ledger", "show", "job", "--basin", basin, "--json").stdout)) == 7
    )

    done = cli(lite.endpoint, "ledger", "reset", "job", "--basin", basin, "--yes")
    assert done.returncode == 0, done.stderr
    last = json_lines(cli(lite.endpoint, "ledger", "show", "job", "--basin", basin, "--json").stdout)[-1]
    assert (last["kind"], last["epoch"], last["batch"], last["scope"]) == ("commit", 1, -1, "batch")
    assert last["ends"] == {"events": 4}  # kept: a fence and three records

    fresh = Coordinator(cfg, "job", query_id="query-2", static_streams=["events"])
    plan = fresh.begin_batch(0)
    assert plan is not None
    assert plan.epoch == 2
    assert not plan.recovery


def test_ledger_reset_of_a_missing_ledger_creates_nothing(lite: LiteServer, basin: str) -> None:
    """Resetting a writer without a ledger exits 3 and does not create the ledger stream."""
    out = cli(lite.endpoint, "ledger", "reset", "ghost", "--basin", basin, "--yes")
    assert out.returncode == 3
    assert "there is nothing to reset" in out.stderr
    again = cli(lite.endpoint, "ledger", "show", "ghost", "--basin", basin)
    assert again.returncode == 3


def test_a_refused_token_is_exit_4_in_words() -> None:
    """A server that refuses the token (401) gives exit 4 and the fix, naming the basin and endpoint."""
    with LiteServer(token="the-right-one") as srv:
        basin = fresh_basin(srv.endpoint, token="the-right-one")
        out = cli(srv.endpoint, "ledger", "show", "w", "--basin", basin, token="a-wrong-one")
    assert out.returncode == 4
    assert f"basin {basin!r} at {srv.endpoint} refused the access token (401" in out.stderr
    assert "set S2_ACCESS_TOKEN" in out.stderr
    assert "a-wrong-one" not in out.stderr


def test_an_unreachable_endpoint_is_exit_1_naming_it(basin: str) -> None:
    """Nothing listening at --endpoint: exit 1, the endpoint named, no traceback."""
    out = cli("http://127.0.0.1:9", "tail", "events", "--basin", basin, "--endpoint", "http://127.0.0.1:1")
    assert out.returncode == 1
    assert "cannot reach S2 at http://127.0.0.1:1" in out.stderr
    assert "Traceback" not in out.stderr


# -- fences ---------------------------------------------------------------------------------------------


def test_fences_clear_removes_tokens_and_says_whose_they_were(lite: LiteServer, basin: str) -> None:
    """`fences clear` removes an exactly-once writer's token and a foreign one, says whose each was, and
    after it the old token no longer matches; a stream without a token is reported as such."""
    w = writer_hash("job")

    async def fence() -> None:
        async with sdk(lite) as s2:
            b = s2.basin(basin)
            await b.ensure_stream("a")
            await b.ensure_stream("b")
            await b.ensure_stream("c")
            await fence_if_older(b.stream("a"), Token(3, 1, w))
            await b.stream("b").append(AppendInput(records=[CommandRecord.fence("someone-else")]))

    asyncio.run(fence())
    out = cli(lite.endpoint, "fences", "clear", "a", "b", "c", "--basin", basin)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        f"stream 'a': cleared fencing token 's2sink:{w}:3.1~' (exactly-once writer with hash {w}, "
        "whose writer id has no ledger in this basin, epoch 3, generation 1)",
        "stream 'b': cleared fencing token 'someone-else' (not an s2_sink token)",
        "stream 'c': had no fencing token",
    ]

    with pytest.raises(FencingTokenMismatchError):
        append(lite, basin, "a", [AppendInput(records=[Record(b"zombie")], fencing_token=f"s2sink:{w}:3.1")])
    again = cli(lite.endpoint, "fences", "clear", "a", "--basin", basin)
    assert again.stdout.strip() == "stream 'a': had no fencing token"


def test_fences_clear_of_a_missing_stream_fails_without_creating_it(lite: LiteServer, basin: str) -> None:
    """A stream name that does not exist is exit 3 even in a basin that creates streams on append."""
    out = cli(lite.endpoint, "fences", "clear", "typo", "--basin", basin)
    assert out.returncode == 3
    assert f"stream 'typo' does not exist in basin {basin!r}" in out.stderr


def test_nothing_missing_is_created_in_a_basin_that_creates_streams_on_read(lite: LiteServer) -> None:
    """In a basin with create_stream_on_read, where S2 creates a stream a check_tail asks for (s2-lite:
    lite/src/backend/read.rs, open_for_check_tail), `fences clear` of a missing stream and `ledger reset` /
    `ledger forget` of a writer without a ledger exit 3 and create nothing (they look the stream up by its
    config, which never creates it)."""
    basin = fresh_basin(lite.endpoint, create_stream_on_read=True)
    for args in (
        ("fences", "clear", "typo"),
        ("ledger", "reset", "ghost", "--yes"),
        ("ledger", "forget", "ghost", "events"),
    ):
        out = cli(lite.endpoint, *args, "--basin", basin)
        assert out.returncode == 3, (args, out.stderr)

    async def names() -> list[str]:
        async with S2("t", endpoints=Endpoints(account=lite.endpoint, basin=lite.endpoint)) as s2:
            return [s.name async for s in s2.basin(basin).list_all_streams()]

    assert asyncio.run(names()) == []


# -- tail -----------------------------------------------------------------------------------------------


def test_tail_prints_the_last_records_decoded_as_insert(lite: LiteServer, basin: str) -> None:
    """`tail -n 3` prints the last three records as JSON lines: JSON bodies decoded, text and binary bodies
    kept, headers shown; a command record in between is left out and does not count."""
    append(
        lite,
        basin,
        "events",
        [
            AppendInput(records=[Record(b'{"id":0}')]),
            AppendInput(records=[Record(b'{"id":1,"name":"x"}', [(b"@key", b"k1")])]),
            AppendInput(records=[CommandRecord.fence("t")]),
            AppendInput(records=[Record(b"plain text"), Record(b"\xff\x00")]),
        ],
    )
    out = cli(lite.endpoint, "tail", "events", "-n", "3", "--basin", basin)
    assert out.returncode == 0, out.stderr
    rows = json_lines(out.stdout)
    assert [r["seq_num"] for r in rows] == [1, 3, 4]
    assert rows[0]["value"] == {"id": 1, "name": "x"}
    assert rows[0]["headers"] == [["@key", "k1"]]
    assert rows[1]["text"] == "plain text"
    assert rows[2]["text"] == "base64:/wA="


def test_tail_of_a_trimmed_stream_prints_each_record_once(lite: LiteServer, basin: str) -> None:
    """`tail -n 5` of a stream trimmed near its end prints the records left, each once: S2 answers a read
    from below the trim point with the records after it (s2-lite: lite/src/backend/read.rs), so a window
    further back returns the same records again (before: printed twice)."""
    append(
        lite,
        basin,
        "events",
        [
            AppendInput(records=[Record(b'{"id":%d}' % i) for i in range(10)]),
            AppendInput(records=[CommandRecord.trim(8)]),
        ],
    )
    out = cli(lite.endpoint, "tail", "events", "-n", "5", "--basin", basin)
    assert out.returncode == 0, out.stderr
    assert [r["seq_num"] for r in json_lines(out.stdout)] == [8, 9]


def test_tail_decodes_upsert_records_and_refuses_other_ones(lite: LiteServer, basin: str) -> None:
    """`--format upsert` prints key, action and value of each change; a record without the upsert headers
    is exit 1 with a pointer to --format insert."""
    append(
        lite,
        basin,
        "changes",
        [
            AppendInput(
                records=[
                    Record(b'{"id":7,"v":"a"}', [(KEY_HEADER, b'{"id":7}'), (ACTION_HEADER, b"u")]),
                    Record(b"", [(KEY_HEADER, b'{"id":8}'), (ACTION_HEADER, b"d")]),
                ]
            )
        ],
    )
    out = cli(lite.endpoint, "tail", "changes", "--format", "upsert", "--basin", basin)
    assert out.returncode == 0, out.stderr
    assert [(r["action"], r["key"], r["value"]) for r in json_lines(out.stdout)] == [
        ("u", {"id": 7}, {"id": 7, "v": "a"}),
        ("d", {"id": 8}, None),
    ]
    append(lite, basin, "changes", [AppendInput(records=[Record(b"{}")])])
    bad = cli(lite.endpoint, "tail", "changes", "-n", "1", "--format", "upsert", "--basin", basin)
    assert bad.returncode == 1
    assert "record 2 is not an upsert record" in bad.stderr
    assert "--format insert" in bad.stderr

    # The changes before the record that is not one are printed before the failure, as it reaches them.
    partly = cli(lite.endpoint, "tail", "changes", "--format", "upsert", "--basin", basin)
    assert partly.returncode == 1
    assert [r["key"] for r in json_lines(partly.stdout)] == [{"id": 7}, {"id": 8}]
    assert "record 2 is not an upsert record" in partly.stderr


def test_tail_follow_prints_new_records_until_interrupted(lite: LiteServer, basin: str) -> None:
    """`tail --follow` prints records appended after it started and exits 130 on Ctrl-C (SIGINT; a second
    Ctrl-C if the first one's clean close stalls)."""
    append(lite, basin, "live", [AppendInput(records=[Record(b'{"n":0}')])])
    env = {**os.environ, "S2_ACCOUNT_ENDPOINT": lite.endpoint, "S2_BASIN_ENDPOINT": lite.endpoint}
    # A test run started in the background of a non-interactive shell hands SIGINT down ignored, and Python
    # keeps an ignored SIGINT ignored: restore Ctrl-C's default in the child, as a terminal would have it.
    start = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv[0] = 's2-sink'; runpy.run_module('s2_sink', run_name='__main__')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", start, "tail", "live", "--follow", "--basin", basin],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["value"] == {"n": 0}
        append(lite, basin, "live", [AppendInput(records=[Record(b'{"n":1}')])])
        assert json.loads(proc.stdout.readline())["value"] == {"n": 1}
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            # The first Ctrl-C closes the read session and the client cleanly; on a loaded machine that close
            # can stall, and a second Ctrl-C interrupts it, as in a terminal. Either way the exit code is 130.
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=30)
        assert code == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


# -- lite, help -----------------------------------------------------------------------------------------


@pytest.fixture
def lite_process(request: pytest.FixtureRequest) -> Iterator[subprocess.Popen[str]]:
    """A lite server started by the command line named in the test's parameter, stopped afterwards."""
    proc = subprocess.Popen(request.param, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    yield proc
    proc.terminate()
    proc.wait(timeout=30)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()


BASINS = ("first-basin", "second-basin")


@pytest.mark.parametrize(
    "lite_process",
    [
        [sys.executable, "-m", "s2_sink.lite", "--port", "0", "--basin", BASINS[0], "--basin", BASINS[1]],
        [sys.executable, "-m", "s2_sink", "lite", "--port", "0", "--basin", BASINS[0], "--basin", BASINS[1]],
    ],
    ids=["python-m-lite", "s2-sink-lite-subcommand"],
    indirect=True,
)
def test_lite_basin_flag_creates_basins_and_prints_exports_to_eval(
    lite_process: subprocess.Popen[str],
) -> None:
    """`--basin` (repeatable) creates the basins before the endpoint is printed; the export line on stderr,
    evaluated by a shell, points the CLI (and the library) at the server: a first write creates its stream."""
    assert lite_process.stdout is not None
    assert lite_process.stderr is not None
    endpoint = lite_process.stdout.readline().strip()
    assert endpoint.startswith("http://127.0.0.1:")
    lines = [lite_process.stderr.readline().strip() for _ in range(2)]
    assert lines[0] == f"# basins: {BASINS[0]}, {BASINS[1]}"
    assert lines[1] == (
        f"export S2_ACCOUNT_ENDPOINT={endpoint} S2_BASIN_ENDPOINT={endpoint} S2_ACCESS_TOKEN=ignored"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("S2_")}
    # What a user's program does with the exports: the library's config from the environment, a first write
    # to each basin (one process for both: an interpreter start each is the test's cost); then the CLI.
    env["FIRST_WRITE"] = (
        "import asyncio, sys\n"
        "from s2_sdk import AppendInput, Record\n"
        "from s2_sink._transport.runtime import make_client\n"
        "from s2_sink.config import S2Config\n"
        "async def go(basin):\n"
        "    cfg = S2Config.from_env(basin=basin)\n"
        "    async with make_client(cfg) as client:\n"
        "        stream = client.basin(cfg.basin).stream('first')\n"
        "        await stream.append(AppendInput([Record(b'{}')]))\n"
        "        print(basin, (await stream.check_tail()).seq_num)\n"
        "for basin in sys.argv[1:]:\n"
        "    asyncio.run(go(basin))\n"
    )
    script = (
        f"{lines[1]}\n"
        f'{sys.executable} -c "$FIRST_WRITE" {" ".join(BASINS)} && '
        f"{sys.executable} -m s2_sink tail first --basin {BASINS[1]}"
    )
    out = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    written, tailed = out.stdout.splitlines()[:2], json_lines("\n".join(out.stdout.splitlines()[2:]))
    assert written == [f"{basin} 1" for basin in BASINS]  # each basin's first write created its stream
    assert tailed == [{"seq_num": 0, "timestamp": tailed[0]["timestamp"], "value": {}}]


def test_lite_basin_flag_refuses_an_invalid_name() -> None:
    """An invalid basin name is a usage error (exit 2) naming the rule, before the server starts."""
    out = subprocess.run(
        [sys.executable, "-m", "s2_sink.lite", "--port", "0", "--basin", "Bad_Name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 2
    assert "basin name must begin with a lowercase letter or number" in out.stderr  # S2's words
    assert "'Bad_Name'" in out.stderr


def test_console_script_help_lists_commands_and_exit_codes() -> None:
    """The installed `s2-sink` script shows every command and documents each exit code."""
    script = Path(sys.executable).parent / "s2-sink"
    out = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0
    for command in ("ledger", "streams", "fences", "tail", "lite"):
        assert command in out.stdout
    for code, meaning in EXIT_CODES.items():
        assert f"{code:<4} {meaning}" in out.stdout
    reset_help = cli("http://127.0.0.1:9", "ledger", "reset", "--help")  # a subcommand's help: in-process
    assert "exactly-once no longer covers batches from before the reset" in " ".join(
        reset_help.stdout.split()
    )


def test_command_help_does_not_depend_on_docstrings() -> None:
    """Under ``python -OO`` (docstrings stripped, as with PYTHONOPTIMIZE=2) each command keeps its help."""
    for argv, summary in (
        ([], "print a stream's last records decoded"),
        (["ledger"], "every exactly-once ledger"),
    ):
        out = subprocess.run(
            [sys.executable, "-OO", "-m", "s2_sink", *argv, "--help"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr
        assert summary in " ".join(out.stdout.split())


def test_ledger_show_does_not_create_the_ledger(lite: LiteServer, basin: str) -> None:
    """`ledger show` only reads: after it, the ledger stream of an unknown writer still does not exist."""
    cli(lite.endpoint, "ledger", "show", "curious", "--basin", basin)

    async def exists() -> bool:
        async with sdk(lite) as s2:
            page = await s2.basin(basin).list_streams(prefix=ledger_stream_name("curious"))
            return bool(page.items)

    assert not asyncio.run(exists())


def test_ledger_show_reports_an_unreadable_record_and_goes_on(lite: LiteServer, basin: str) -> None:
    """A ledger record that is not a ledger snapshot is shown as unreadable with the reason; the records
    around it are still decoded."""
    cfg = config(lite, basin)
    write_exactly_once(cfg, "mixed", [[b"x"]])
    append(lite, basin, ledger_stream_name("mixed"), [AppendInput(records=[Record(b"not json")])])
    out = cli(lite.endpoint, "ledger", "show", "mixed", "--basin", basin, "--json")
    assert out.returncode == 0, out.stderr
    rows = json_lines(out.stdout)
    assert [r.get("kind") for r in rows] == ["open", "intent", "commit", None]
    assert rows[3]["seq_num"] == 3
    assert "has an unreadable record" in rows[3]["error"]


def test_lite_exports_never_echo_a_configured_token() -> None:
    """With --token the export line leaves the token out and says to export it; without, any value works."""
    from s2_sink.lite.__main__ import exports

    with_token = exports("http://127.0.0.1:8080", "s3cret")
    assert "s3cret" not in with_token
    assert with_token.splitlines() == [
        "export S2_ACCOUNT_ENDPOINT=http://127.0.0.1:8080 S2_BASIN_ENDPOINT=http://127.0.0.1:8080",
        "# and export S2_ACCESS_TOKEN set to the --token value",
    ]
    assert exports("http://127.0.0.1:8080", None).endswith(" S2_ACCESS_TOKEN=ignored")


def test_ledger_show_words_an_outage_as_a_command_line_user_can_act_on_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """`ledger show` reads the ledger with the command's patience: its first wait and its giving up name what
    a command-line user can do (Ctrl-C, run it again), not the library option s2.delivery-timeout-ms, which
    the command does not take."""
    refused = S2ClientError("connect")
    refused.__cause__ = ConnectionRefusedError(111, "Connection refused")
    retrying = Retrying(PATIENCE, "reading back '_s2sink/ledger/w' from seq_num 0")
    with caplog.at_level(logging.WARNING, logger="s2_sink._transport.retry"):
        assert retrying.wait(refused) is not None
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "s2.delivery-timeout-ms" not in warning
    assert "Ctrl-C stops it sooner; run it again once S2 answers" in warning
    assert retrying.since is not None
    retrying.since -= PATIENCE.timeout_s + 1  # the deadline has passed
    (note,) = retrying.give_up(refused).__notes__
    assert "s2.delivery-timeout-ms" not in note
    assert note.endswith("past the deadline: " + PATIENCE.fix)  # type: ignore[operator]
