"""Read-committed reads without Spark: the isolation options, the cap by committed ends, and the committed
ends read from a real exactly-once ledger on the lite server."""

from __future__ import annotations

import re

import pytest
import s2_sdk
from hypothesis import given
from hypothesis import strategies as st

from s2_sink._exactly_once.ledger_records import SNAPSHOT_EVERY
from s2_sink._exactly_once.sink_run import commit_sink_run, open_sink_run
from s2_sink._read.partition import S2Partition
from s2_sink._read.planning.committed import CommittedEnds
from s2_sink._read.planning.data_loss import positions
from s2_sink._read.planning.offsets import cap_committed
from s2_sink._read.read_options import parse_read_options
from s2_sink._read.rows.schemas import RAW_SCHEMA
from s2_sink.datasource import S2DataSource
from s2_sink.datasource._readers import S2StreamReader
from s2_sink.errors import ConfigError
from s2_sink.lite import LiteServer
from tests.faults._support import cfg_for, client, make_basin, read_all, run
from tests.integration._eo_batches import commit, open_execution, write_partitions

offsets = st.dictionaries(st.sampled_from(["a", "b", "c"]), st.integers(0, 1000), max_size=3)


def test_isolation_defaults_to_read_uncommitted() -> None:
    """Without s2.isolation a read is bounded by the tails only (no writer named)."""
    assert parse_read_options({"s2.stream": "s"}, streaming=False).committed_by is None
    level = {"s2.stream": "s", "s2.isolation": " Read-Uncommitted "}
    assert parse_read_options(level, streaming=True).committed_by is None


@pytest.mark.parametrize("streaming", [False, True])
def test_read_committed_takes_a_writer_id_or_its_ledger_stream_name(streaming: bool) -> None:
    """s2.committed-by names the writer as S2Writer(writer_id=...) / s2.writer-id do; the ledger stream's
    name (what a stream listing shows) names the same writer."""
    for by in ("orders-v1", "_s2sink/ledger/orders-v1", " orders-v1 "):
        options = {"s2.stream": "s", "s2.isolation": "read-committed", "s2.committed-by": by}
        assert parse_read_options(options, streaming=streaming).committed_by == "orders-v1"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"s2.isolation": "foo"}, "option s2.isolation='foo' must be read-uncommitted (the default) or"),
        ({"s2.isolation": "read-committed"}, "s2.isolation=read-committed needs s2.committed-by=<writer id>"),
        ({"s2.isolation": "read-committed", "s2.committed-by": " "}, "needs s2.committed-by=<writer id>"),
        (
            {"s2.committed-by": "w"},
            "option s2.committed-by='w' applies only with s2.isolation=read-committed",
        ),
        (
            {"s2.isolation": "read-uncommitted", "s2.committed-by": "w"},
            "s2.committed-by='w' applies only with s2.isolation=read-committed",
        ),
        ({"s2.isolation": "read-committed", "s2.committed-by": "a b"}, "s2.committed-by='a b': writer_id"),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
def test_bad_isolation_options_name_option_value_and_fix(
    extra: dict[str, str], message: str, streaming: bool
) -> None:
    """Every rejected isolation option raises ConfigError naming the option, the value and the fix."""
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_read_options({"s2.stream": "s", **extra}, streaming=streaming)


def test_data_source_accepts_the_isolation_options_and_rejects_bad_ones_on_the_driver() -> None:
    """reader() knows s2.isolation and s2.committed-by (not taken for unknown connection options) and
    refuses a bad level before planning anything."""
    base = {
        "s2.stream": "s",
        "s2.basin": "unused-basin",
        "s2.endpoints.account": "http://127.0.0.1:9",
        "s2.endpoints.basin": "http://127.0.0.1:9",
        "s2.preflight": "false",  # no server here: only the option parsing is under test
    }
    committed = {**base, "s2.isolation": "read-committed", "s2.committed-by": "w"}
    assert S2DataSource(committed).reader(RAW_SCHEMA) is not None
    with pytest.raises(ConfigError, match=re.escape("s2.isolation='snapshot'")):
        S2DataSource({**base, "s2.isolation": "snapshot"}).reader(RAW_SCHEMA)


@given(positions=offsets, committed=st.one_of(st.none(), offsets))
def test_cap_committed_never_passes_a_commit(
    positions: dict[str, int], committed: dict[str, int] | None
) -> None:
    """Capped positions are the given ones without committed ends; with them, no stream passes its
    committed end, a stream never committed to stays at 0, and nothing below a committed end moves."""
    capped = cap_committed(positions, committed)
    assert capped.keys() == positions.keys()
    for stream, seq in capped.items():
        if committed is None:
            assert seq == positions[stream]
        else:
            assert seq == min(positions[stream], committed.get(stream, 0))


def test_committed_ends_fold_the_latest_commit_across_snapshots_and_trims(lite: LiteServer) -> None:
    """The committed ends are the latest commit's, folded from a real ledger of more than one snapshot
    (its older records trimmed): an ``open`` after the commit (a batch in flight) keeps them, a stream
    the writer never committed to is absent, and a new commit is seen by the same reader object."""
    basin = make_basin(lite.endpoint, ["a", "b"])
    cfg = cfg_for(lite.endpoint, basin)
    ends = CommittedEnds(cfg, "w")
    batches = SNAPSHOT_EVERY + 3
    for batch in range(batches):
        r = open_sink_run(cfg, "w", "q", [])
        commit_sink_run(cfg, "w", r, batch, {"a": batch + 1, **({"b": 7} if batch == 2 else {})})
    assert ends.fetch() == {"a": batches, "b": 7}
    assert run(read_all(lite.endpoint, basin, "_s2sink/ledger/w"))[0].seq_num > 0  # trimmed: a snapshot
    assert ends.fetch() == {"a": batches, "b": 7}  # the ledger did not move: the same answer
    open_sink_run(cfg, "w", "q", [])  # the next batch is in flight: nothing new is committed
    assert ends.fetch() == {"a": batches, "b": 7}
    r = open_sink_run(cfg, "w", "q", [])  # its driver died; the replay commits
    commit_sink_run(cfg, "w", r, batches, {"a": batches + 5})
    assert ends.fetch() == {"a": batches + 5, "b": 7}


def test_a_writer_that_never_ran_is_a_config_error_naming_option_and_ledger(lite: LiteServer) -> None:
    """No ledger stream for the writer id: ConfigError naming s2.committed-by, the id, the ledger stream
    and the fixes; the ledger stream is not created by looking."""
    basin = make_basin(lite.endpoint, ["a"])
    cfg = cfg_for(lite.endpoint, basin)
    with pytest.raises(
        ConfigError, match=r"s2\.committed-by='nobody'.*'_s2sink/ledger/nobody'.*read-uncommitted"
    ):
        CommittedEnds(cfg, "nobody").fetch()
    with pytest.raises(ConfigError, match="no ledger stream"):
        CommittedEnds(cfg, "nobody").fetch()  # still missing: looking did not create it


def test_a_ledger_without_commits_commits_nothing(lite: LiteServer) -> None:
    """A writer whose first batch is in flight (an ``open``, no ``commit``) has committed no stream."""
    basin = make_basin(lite.endpoint, ["a"])
    cfg = cfg_for(lite.endpoint, basin)
    open_sink_run(cfg, "w", "q", [])
    assert CommittedEnds(cfg, "w").fetch() == {}


async def _append(endpoint: str, basin: str, stream: str, bodies: list[bytes]) -> None:
    async with client(endpoint) as s2:
        records = [s2_sdk.Record(body=b) for b in bodies]
        await s2.basin(basin).stream(stream).append(s2_sdk.AppendInput(records=records))


def _source(endpoint: str, basin: str, **extra: str) -> S2DataSource:
    return S2DataSource(
        {
            "s2.basin": basin,
            "s2.endpoints.account": endpoint,
            "s2.endpoints.basin": endpoint,
            "s2.streams": "events,other",
            **extra,
        }
    )


def _committed(endpoint: str, basin: str, **extra: str) -> S2DataSource:
    return _source(endpoint, basin, **{"s2.isolation": "read-committed", "s2.committed-by": "w", **extra})


def _batch_ranges(source: S2DataSource) -> list[tuple[str, int, int]]:
    partitions = source.reader(RAW_SCHEMA).partitions()
    return [r for p in partitions if isinstance(p, S2Partition) for r in p.ranges]


def test_planning_stops_at_the_latest_commit_until_the_next_one(lite: LiteServer) -> None:
    """A writer committed batch 0 (4 records), then its driver died with half of batch 1 written. Batch
    plans and streaming offsets stop at batch 0's end (``latest`` too), a stream the writer never committed
    to plans nothing, and read-uncommitted plans up to the tails; once the replay of batch 1 commits, the
    same stream reader's next end covers all of batch 1."""
    basin = make_basin(lite.endpoint, ["events", "other"])
    cfg = cfg_for(lite.endpoint, basin)
    r1 = open_execution(cfg, "w")
    commit(r1, cfg, 0, write_partitions(r1, cfg, 0, {0: [b"a0", b"a1"], 1: [b"a2", b"a3"]}))
    done = CommittedEnds(cfg, "w").fetch()["events"]
    r2 = open_execution(cfg, "w")
    write_partitions(r2, cfg, 1, {0: [b"b0", b"b1"]})  # the driver dies before the commit
    run(_append(lite.endpoint, basin, "other", [b"x0", b"x1"]))  # by some other writer
    tails = _source(lite.endpoint, basin).streamReader(RAW_SCHEMA)
    assert isinstance(tails, S2StreamReader)
    partial = positions(tails.latestOffset())["events"]
    assert partial > done

    assert _batch_ranges(_committed(lite.endpoint, basin)) == [("events", 0, done)]
    assert _batch_ranges(_source(lite.endpoint, basin)) == [("events", 0, partial), ("other", 0, 2)]
    stream = _committed(lite.endpoint, basin, **{"s2.starting-position": "latest"}).streamReader(RAW_SCHEMA)
    assert isinstance(stream, S2StreamReader)
    assert positions(stream.initialOffset()) == {"events": done, "other": 0}
    assert positions(stream.latestOffset()) == {"events": done, "other": 0}

    r3 = open_execution(cfg, "w")
    assert r3.recovery
    commit(r3, cfg, 1, write_partitions(r3, cfg, 1, {0: [b"b0", b"b1"], 1: [b"b2", b"b3"]}))
    end = positions(stream.latestOffset())
    assert end["events"] == CommittedEnds(cfg, "w").fetch()["events"] > partial
    planned = stream.partitions({"events": done, "other": 0}, end)
    assert [r for p in planned if isinstance(p, S2Partition) for r in p.ranges] == [
        ("events", done, end["events"])
    ]


def test_a_replay_that_appends_nothing_still_commits_the_end_of_what_it_read_back(lite: LiteServer) -> None:
    """The dead run wrote all of batch 1 before its driver died; the replay subtracts every record and
    appends nothing, yet its commit's end covers the dead run's records, so read-committed shows them."""
    basin = make_basin(lite.endpoint, ["events"])
    cfg = cfg_for(lite.endpoint, basin)
    r1 = open_execution(cfg, "w")
    commit(r1, cfg, 0, write_partitions(r1, cfg, 0, {0: [b"a"]}))
    r2 = open_execution(cfg, "w")
    write_partitions(r2, cfg, 1, {0: [b"b"]})  # all of batch 1; the driver dies before the commit
    r3 = open_execution(cfg, "w")
    ends = write_partitions(r3, cfg, 1, {0: [b"b"]})
    commit(r3, cfg, 1, ends)
    stored = run(read_all(lite.endpoint, basin, "events"))
    assert [bytes(r.body) for r in stored] == [b"a", b"b"]  # written once
    assert CommittedEnds(cfg, "w").fetch()["events"] > stored[-1].seq_num
