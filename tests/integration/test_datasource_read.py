"""format("s2") reads, batch and streaming, against the lite server with a real local Spark."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s2_sdk
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from s2_sink.datasource import register
from tests import s2_target

pytestmark = [pytest.mark.spark]


# ------------------------------------------------------------------------------------------------
# helpers


def _client(endpoint: str) -> s2_sdk.S2:
    return s2_sdk.S2(s2_target.token(), endpoints=s2_sdk.Endpoints(account=endpoint, basin=endpoint))


def new_basin(endpoint: str, *streams: str, create_on_append: bool = False) -> str:
    """A fresh basin with the given streams (and any stream an append names, with ``create_on_append``)."""
    name = s2_target.basin_name()

    async def go() -> None:
        async with _client(endpoint) as s2:
            config = s2_sdk.BasinConfig(create_stream_on_append=True) if create_on_append else None
            await s2.create_basin(name, config=config)
            basin = s2.basin(name)
            for stream in streams:
                await basin.create_stream(stream)

    asyncio.run(go())
    return name


def create_stream(endpoint: str, basin: str, stream: str) -> None:
    """Create one stream in an existing basin."""

    async def go() -> None:
        async with _client(endpoint) as s2:
            await s2.basin(basin).create_stream(stream)

    asyncio.run(go())


def append(endpoint: str, basin: str, stream: str, records: list[s2_sdk.Record]) -> list[int]:
    """Append records in one batch; returns their seq_nums."""

    async def go() -> list[int]:
        async with _client(endpoint) as s2:
            ack = await s2.basin(basin).stream(stream).append(s2_sdk.AppendInput(records=records))
            return list(range(ack.start.seq_num, ack.end.seq_num))

    return asyncio.run(go())


def bodies(*texts: str) -> list[s2_sdk.Record]:
    """Plain records with UTF-8 bodies."""
    return [s2_sdk.Record(body=t.encode()) for t in texts]


def upsert(key: dict[str, Any], value: dict[str, Any] | None) -> s2_sdk.Record:
    """An upsert changelog record (the @key/@action header layout of the Flink connector)."""
    headers = [(b"@key", json.dumps(key).encode()), (b"@action", b"u" if value is not None else b"d")]
    return s2_sdk.Record(body=json.dumps(value).encode() if value is not None else b"", headers=headers)


def opts(endpoint: str, basin: str, **extra: str) -> dict[str, str]:
    """Reader options pointing at the lite server."""
    return {
        "s2.basin": basin,
        "s2.endpoints.account": endpoint,
        "s2.endpoints.basin": endpoint,
        **{k.replace("_", "-"): v for k, v in extra.items()},
    }


@pytest.fixture(scope="module")
def sp(spark: SparkSession) -> SparkSession:
    """The shared Spark session with format("s2") registered."""
    register(spark)
    return spark


@pytest.fixture
def endpoint(lite: Any) -> str:
    """The lite server's endpoint (or the one endpoint of the S2 the suite runs against)."""
    return str(lite.endpoint)


def wait_for(cond: Any, timeout: float = 30.0) -> None:
    """Poll until cond() is true."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.2)


# ------------------------------------------------------------------------------------------------
# batch


def test_batch_raw_reads_data_records_of_named_streams(sp: SparkSession, endpoint: str) -> None:
    """A batch read returns every data record of the named streams with stream, seq_num, headers and body,
    and skips command records (a fence in the middle of a stream)."""
    basin = new_basin(endpoint, "a", "b")
    append(endpoint, basin, "a", [s2_sdk.Record(body=b"a0", headers=[(b"h", b"1")]), *bodies("a1", "a2")])
    append(endpoint, basin, "a", [s2_sdk.CommandRecord.fence("tok")])
    append(endpoint, basin, "a", bodies("a4"))
    append(endpoint, basin, "b", bodies("b0", "b1"))

    df = sp.read.format("s2").options(**opts(endpoint, basin, **{"s2.streams": "a, b"})).load()
    rows = sorted(
        (r.stream, r.seq_num, bytes(r.body), [(bytes(h.key), bytes(h.value)) for h in r.headers])
        for r in df.collect()
    )
    assert rows == [
        ("a", 0, b"a0", [(b"h", b"1")]),
        ("a", 1, b"a1", []),
        ("a", 2, b"a2", []),
        ("a", 4, b"a4", []),
        ("b", 0, b"b0", []),
        ("b", 1, b"b1", []),
    ]
    assert df.schema.fieldNames() == ["stream", "seq_num", "timestamp", "headers", "body"]
    assert all(r.timestamp.year >= 2024 for r in df.collect())


def test_batch_bounds_select_ranges(sp: SparkSession, endpoint: str) -> None:
    """Starting/ending positions by seq_num and by timestamp bound what a batch read returns; a user schema
    that selects a subset of the raw columns is honoured; small partitions split one stream's range."""
    basin = new_basin(endpoint, "s")
    records = [s2_sdk.Record(body=f"r{i}".encode(), timestamp=1_000 * (i + 1)) for i in range(6)]
    append(endpoint, basin, "s", records)
    base = opts(endpoint, basin, **{"s2.stream": "s"})

    def seqs(**extra: str) -> list[int]:
        df = sp.read.format("s2").schema("seq_num long").options(**base, **extra).load()
        return sorted(r.seq_num for r in df.collect())

    assert seqs() == [0, 1, 2, 3, 4, 5]
    assert seqs(**{"s2.starting-position": '{"s": 2}', "s2.ending-position": '{"s": 4}'}) == [2, 3]
    assert seqs(**{"s2.starting-position": "latest"}) == []
    assert seqs(**{"s2.starting-timestamp": "3000"}) == [2, 3, 4, 5]
    assert seqs(**{"s2.starting-timestamp": "2500", "s2.ending-timestamp": "5000"}) == [2, 3]
    split = sp.read.format("s2").options(**base, **{"s2.records-per-partition": "2"}).load()
    assert split.rdd.getNumPartitions() == 3
    assert sorted(r.seq_num for r in split.collect()) == [0, 1, 2, 3, 4, 5]


def test_json_numbers_read_as_sparks_own_json_reader_reads_them(sp: SparkSession, endpoint: str) -> None:
    """``s2.format=json`` gives a double column what Spark's ``from_json`` gives for the same bodies, the
    sign of zero included: the integer ``-0`` is 0.0, ``-0.0`` and ``-0e0`` are -0.0 (the bulk reader read
    the integer ``-0`` as -0.0)."""
    texts = ['{"x": -0}', '{"x": -0.0}', '{"x": -0e0}', '{"x": 0}', '{"x": -0, "s": "a"}', '{"x": 1.5}']
    basin = new_basin(endpoint, "z")
    append(endpoint, basin, "z", bodies(*texts))
    schema = "x double, s string"
    ours = sp.read.format("s2").schema(f"{schema}, _s2_seq_num long")
    df = ours.options(**opts(endpoint, basin, **{"s2.stream": "z", "s2.format": "json"})).load()
    read = [(r.x, r.s) for r in sorted(df.collect(), key=lambda r: r._s2_seq_num)]
    text = sp.createDataFrame([(t,) for t in texts], "body string")
    sparks = [(r.j.x, r.j.s) for r in text.select(F.from_json("body", schema).alias("j")).collect()]
    assert [(repr(x), s) for x, s in read] == [(repr(x), s) for x, s in sparks]
    assert [repr(x) for x, _ in read] == ["0.0", "-0.0", "-0.0", "0.0", "0.0", "1.5"]


def test_upsert_changelog_and_materialization(sp: SparkSession, endpoint: str) -> None:
    """format upsert shows the changelog (key, action, value); s2.upsert-materialize=true keeps only the
    latest update per key, with deleted keys gone."""
    basin = new_basin(endpoint, "t")
    append(
        endpoint,
        basin,
        "t",
        [
            upsert({"id": 1}, {"name": "a", "qty": 1}),
            upsert({"id": 2}, {"name": "b", "qty": 2}),
            upsert({"id": 1}, {"name": "a2", "qty": 10}),
            upsert({"id": 3}, {"name": "c", "qty": 3}),
            upsert({"id": 2}, None),
            upsert({"id": 4}, {"name": "d", "qty": 4}),
            upsert({"id": 4}, None),
            upsert({"id": 4}, {"name": "d2", "qty": 40}),
        ],
    )
    base = opts(endpoint, basin, **{"s2.stream": "t", "s2.format": "upsert"})

    log = sp.read.format("s2").options(**base).load().orderBy("seq_num").collect()
    assert [(r.key, r.action) for r in log][:5] == [
        ('{"id": 1}', "u"),
        ('{"id": 2}', "u"),
        ('{"id": 1}', "u"),
        ('{"id": 3}', "u"),
        ('{"id": 2}', "d"),
    ]
    assert log[4].value is None
    assert json.loads(log[0].value) == {"name": "a", "qty": 1}

    untyped = sp.read.format("s2").options(**base, **{"s2.upsert-materialize": "true"}).load()
    assert sorted(r.key for r in untyped.collect()) == ['{"id": 1}', '{"id": 3}', '{"id": 4}']


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"s2.stream": "s", "s2.starting-position": "bogus"}, "s2.starting-position='bogus'"),
        ({"s2.stream": "s", "s2.no-such-option": "1"}, "unknown option s2.no-such-option='1'"),
        ({"s2.stream": "s", "s2.format": "json"}, "s2.format=json needs a schema"),
    ],
)
def test_bad_options_fail_on_the_driver(
    sp: SparkSession, endpoint: str, extra: dict[str, str], message: str
) -> None:
    """Invalid reader options fail when the read is planned, with a message naming the option and value."""
    options = opts(endpoint, "bad-basin-unused", **extra)
    with pytest.raises(Exception, match="ConfigError") as info:
        sp.read.format("s2").options(**options).load().collect()
    assert message in str(info.value)


def test_bad_basin_name_names_the_option(sp: SparkSession, endpoint: str) -> None:
    """A malformed basin is reported with the option name before anything is read."""
    options = opts(endpoint, "Bad_Basin", **{"s2.stream": "s"})
    with pytest.raises(Exception, match=r"s2\.basin"):
        sp.read.format("s2").options(**options).load().collect()


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        # Planning looks up the tail of the stream on the driver.
        ({}, "checking the tail of ['ghost']"),
        # An explicit end skips the lookup, so the executor's range read meets the missing stream.
        ({"s2.ending-position": '{"ghost": 5}'}, "reading 'ghost' seq_nums [0, 5)"),
    ],
)
def test_reading_a_missing_stream_raises_read_error(
    sp: SparkSession, endpoint: str, extra: dict[str, str], where: str
) -> None:
    """A read of a stream that does not exist fails with ReadError naming the stream and the basin, whether
    the driver's planning or an executor's range read finds it missing (the preflight, which would find it
    first, is off here)."""
    basin = new_basin(endpoint)
    options = opts(endpoint, basin, **{"s2.stream": "ghost", "s2.preflight": "false", **extra})
    with pytest.raises(Exception, match="ReadError") as info:
        sp.read.format("s2").options(**options).load().collect()
    assert f"{where} in basin {basin!r} failed" in str(info.value)
    assert f"does not exist in basin {basin!r} at {endpoint}: check s2.stream" in str(info.value)


def test_the_preflight_refuses_a_missing_stream_while_planning(sp: SparkSession, endpoint: str) -> None:
    """With the preflight on (the default), a read of a missing stream fails while Spark plans it, with one
    message naming the stream, basin, endpoint and the fix."""
    basin = new_basin(endpoint)
    with pytest.raises(Exception, match="PreflightError") as info:
        sp.read.format("s2").options(**opts(endpoint, basin, **{"s2.stream": "ghost"})).load().collect()
    assert f"format('s2') read: stream 'ghost' does not exist in basin {basin!r} at {endpoint}" in str(
        info.value
    )


# ------------------------------------------------------------------------------------------------
# streaming


def _rows(sp: SparkSession, path: Path) -> list[tuple[str, int, bytes]]:
    if not any(path.glob("*.parquet")):
        return []
    return sorted((r.stream, r.seq_num, bytes(r.body)) for r in sp.read.parquet(str(path)).collect())


def _start(sp: SparkSession, options: dict[str, str], out: Path, checkpoint: Path) -> Any:
    df = sp.readStream.format("s2").options(**options).load().select("stream", "seq_num", "body")
    return (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


@pytest.fixture
def stopper() -> Iterator[list[Any]]:
    """Stops every query a test started, even when it fails."""
    queries: list[Any] = []
    yield queries
    for q in queries:
        q.stop()


def test_stream_follows_appends_and_restarts_without_loss_or_repeat(
    sp: SparkSession, endpoint: str, tmp_path: Path, stopper: list[Any]
) -> None:
    """A streaming read picks up new appends across micro-batches; each trigger takes at most
    s2.max-records-per-trigger records; after stop and restart from the checkpoint every record has been
    written to the (exactly-once) file sink once: no loss, no repeat."""
    basin = new_basin(endpoint, "x", "y")
    append(endpoint, basin, "x", bodies(*(f"x{i}" for i in range(5))))
    append(endpoint, basin, "y", bodies("y0", "y1"))
    options = opts(endpoint, basin, **{"s2.streams": "x,y", "s2.max-records-per-trigger": "4"})
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"

    q = _start(sp, options, out, ckpt)
    stopper.append(q)
    q.processAllAvailable()
    assert len(_rows(sp, out)) == 7
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 4
    assert sum(sizes) == 7

    append(endpoint, basin, "x", bodies("x5", "x6"))
    q.processAllAvailable()
    assert len(_rows(sp, out)) == 9
    q.stop()

    append(endpoint, basin, "y", bodies("y2"))
    append(endpoint, basin, "x", [s2_sdk.CommandRecord.fence("zz")])
    append(endpoint, basin, "x", bodies("x8", "x9", "x10", "x11"))
    q2 = _start(sp, options, out, ckpt)
    stopper.append(q2)
    q2.processAllAvailable()
    expected = sorted(
        [("x", i, f"x{i}".encode()) for i in (0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11)]
        + [("y", i, f"y{i}".encode()) for i in range(3)]
    )
    assert _rows(sp, out) == expected
    # The cap still holds after the restart (the frontier came back from the offset log).
    after = [p["numInputRows"] for p in q2.recentProgress if p["numInputRows"]]
    assert max(after) <= 4


def test_stream_discovers_new_streams_under_prefix(
    sp: SparkSession, endpoint: str, tmp_path: Path, stopper: list[Any]
) -> None:
    """With s2.stream-prefix, streams created after the query started are read from their first record,
    and streams outside the prefix are not read."""
    basin = new_basin(endpoint, "orders/0", "other")
    append(endpoint, basin, "orders/0", bodies("o0"))
    append(endpoint, basin, "other", bodies("no"))
    options = opts(endpoint, basin, **{"s2.stream-prefix": "orders/", "s2.starting-position": "earliest"})
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = _start(sp, options, out, ckpt)
    stopper.append(q)
    q.processAllAvailable()
    assert _rows(sp, out) == [("orders/0", 0, b"o0")]

    create_stream(endpoint, basin, "orders/1")
    append(endpoint, basin, "orders/1", bodies("n0", "n1"))
    q.processAllAvailable()
    assert _rows(sp, out) == [("orders/0", 0, b"o0"), ("orders/1", 0, b"n0"), ("orders/1", 1, b"n1")]


def test_stream_rejects_batch_only_options(sp: SparkSession, endpoint: str, tmp_path: Path) -> None:
    """Batch-only options on readStream fail the query at start with the option named."""
    options = opts(endpoint, "stream-bad-opts", **{"s2.stream": "s", "s2.ending-position": "latest"})
    df = sp.readStream.format("s2").options(**options).load()
    query = df.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
    try:
        with pytest.raises(Exception, match=r"s2\.ending-position") as info:
            query.awaitTermination(60)
    finally:
        query.stop()
    assert "batch reads only" in str(info.value)


def test_stream_fails_on_data_loss_unless_told_to_go_on(
    sp: SparkSession, endpoint: str, tmp_path: Path, stopper: list[Any]
) -> None:
    """Records trimmed between two runs of a query are data loss: the restarted query fails naming how many
    records of which stream were lost and s2.fail-on-data-loss; restarted with the option false it goes on
    from the trim point on the same checkpoint, and the file sink holds every record that was kept."""
    basin = new_basin(endpoint, "x")
    append(endpoint, basin, "x", bodies(*(f"x{i}" for i in range(5))))
    options = opts(endpoint, basin, **{"s2.stream": "x"})
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = _start(sp, options, out, ckpt)
    stopper.append(q)
    q.processAllAvailable()
    q.stop()
    assert len(_rows(sp, out)) == 5

    append(endpoint, basin, "x", bodies(*(f"x{i}" for i in range(5, 10))))
    append(endpoint, basin, "x", [s2_sdk.CommandRecord.trim(8)])  # seq_nums 5, 6 and 7 are gone
    q2 = _start(sp, options, out, ckpt)
    stopper.append(q2)
    with pytest.raises(Exception, match="were trimmed or expired") as info:
        q2.awaitTermination(120)
    assert f"3 records of stream 'x' in basin '{basin}' (seq_nums [5, 8))" in str(info.value)
    assert "s2.fail-on-data-loss=false" in str(info.value)

    q3 = _start(sp, {**options, "s2.fail-on-data-loss": "false"}, out, ckpt)
    stopper.append(q3)
    q3.processAllAvailable()
    expected = [("x", i, f"x{i}".encode()) for i in (0, 1, 2, 3, 4, 8, 9)]
    assert _rows(sp, out) == expected


def test_stream_caps_batches_by_metered_bytes(
    sp: SparkSession, endpoint: str, tmp_path: Path, stopper: list[Any]
) -> None:
    """s2.max-bytes-per-trigger ends each micro-batch after the last record that fits (100-byte records,
    250 bytes: batches of 2, 2 and 1), and every record is read once."""
    basin = new_basin(endpoint, "x")
    append(endpoint, basin, "x", [s2_sdk.Record(body=f"{i}".encode() * 92) for i in range(5)])
    options = opts(endpoint, basin, **{"s2.stream": "x", "s2.max-bytes-per-trigger": "250"})
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = _start(sp, options, out, ckpt)
    stopper.append(q)
    q.processAllAvailable()
    assert [seq for _, seq, _ in _rows(sp, out)] == [0, 1, 2, 3, 4]
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [2, 2, 1]


def _available_now(sp: SparkSession, options: dict[str, str], out: Path, checkpoint: Path) -> list[int]:
    """Run one Trigger.AvailableNow query to its end; the sizes of its non-empty batches."""
    df = sp.readStream.format("s2").options(**options).load().select("stream", "seq_num", "body")
    q = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert q.awaitTermination(120), "the AvailableNow query did not end"
    finally:
        q.stop()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


@pytest.mark.skipif(
    importlib.util.find_spec("pyspark.sql.streaming.datasource") is not None,
    reason="pyspark 4.2+ drains capped AvailableNow runs (test_datasource_read_ops)",
)
def test_available_now_on_pyspark_4_1_plans_one_batch_per_run(
    sp: SparkSession, endpoint: str, tmp_path: Path
) -> None:
    """pyspark 4.1's Python Data Source API asks a source for its end offset once per Trigger.AvailableNow
    run (the source cannot see the trigger), so: without a cap a run drains the backlog in one batch and
    ends; with s2.max-records-per-trigger a run reads one capped batch and the next run goes on from there,
    with nothing lost or repeated (the behaviour the README documents)."""
    basin = new_basin(endpoint, "x", "y")
    append(endpoint, basin, "x", bodies(*(f"x{i}" for i in range(5))))
    uncapped = opts(endpoint, basin, **{"s2.stream": "x"})
    assert _available_now(sp, uncapped, tmp_path / "o1", tmp_path / "c1") == [5]
    assert len(_rows(sp, tmp_path / "o1")) == 5

    append(endpoint, basin, "y", bodies(*(f"y{i}" for i in range(5))))
    capped = opts(endpoint, basin, **{"s2.stream": "y", "s2.max-records-per-trigger": "2"})
    out, ckpt = tmp_path / "o2", tmp_path / "c2"
    assert _available_now(sp, capped, out, ckpt) == [2]
    assert _available_now(sp, capped, out, ckpt) == [2]
    assert _available_now(sp, capped, out, ckpt) == [1]
    assert [seq for _, seq, _ in _rows(sp, out)] == [0, 1, 2, 3, 4]
