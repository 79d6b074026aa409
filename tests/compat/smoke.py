"""One compatibility leg's smoke: run with the python of a fresh virtualenv holding the installed package.

``matrix.py`` installs ``s2-sink`` and one pyspark into a fresh virtualenv and runs this script there, from
outside the checkout, so it exercises what users get. Against an in-process lite server and a local Spark:

- ``foreachBatch(S2Writer)``: a streaming query of three micro-batches (exactly-once, the default), read back
  with the SDK: the same rows, each once.
- where the pyspark has the Python Data Source API: ``df.write.format("s2")``, then a batch read and a
  streaming read (``availableNow``) of that stream, each giving back exactly the rows written; elsewhere
  ``register`` must raise the error naming the installed version and ``foreachBatch(S2Writer)``.
- where the pyspark has the Arrow streaming writer: ``df.writeStream.format("s2")`` read back exactly;
  elsewhere starting that query must fail with the error naming the version and the alternative.
- exactly-once under a fault, on every surface that writes a stream: the Python worker writing micro-batch 1
  is killed (``os._exit``) after its third append was sent and before its ack; Spark retries the task, which
  reads back and subtracts, and the stream still holds every row once (the check fails if the crash did not
  fire).

With ``--connect`` it runs the Spark Connect shape instead (a Databricks serverless job's: the session is
``SparkSession.builder.remote("local[2]")``): ``foreachBatch(S2Writer)`` with an explicit ``writer_id`` over
``availableNow``, restarted from its checkpoint for a second run with a new file, read back exactly; and
``df.write.format("s2")`` / ``spark.read.format("s2")`` where the pyspark has the data source API.

``--quick`` leaves out the worker-killed checks (for a leg whose pyspark line another leg of the same run
already covers with them).

With ``--client`` it checks a Spark Connect client environment where no local server can start (pyspark 3.5
needs the spark-connect jar from Maven for one): the client's generated protos load and round-trip under the
protobuf installed, its gRPC channel can be built, and the SDK appends to and reads back from the lite server.

It prints progress on stderr and, last on stdout, one JSON object: the versions and each check's outcome.
It exits 1 when any check failed.
"""

from __future__ import annotations

import asyncio
import glob
import json
import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

ROWS_PER_FILE = 1000
FILES = 3
SCHEMA_DDL = "id long, name string, score double"


def _log(message: str) -> None:
    print(f"[smoke] {message}", file=sys.stderr, flush=True)


def expected_rows() -> list[dict[str, Any]]:
    """The rows every surface writes: distinct ids, so a lost or duplicated record shows."""
    return [{"id": i, "name": f"row-{i}", "score": i * 0.5} for i in range(ROWS_PER_FILE * FILES)]


def _write_source(folder: Path) -> None:
    rows = expected_rows()
    folder.mkdir(parents=True)
    for n in range(FILES):
        part = rows[n * ROWS_PER_FILE : (n + 1) * ROWS_PER_FILE]
        (folder / f"part-{n}.json").write_text("".join(json.dumps(r) + "\n" for r in part))


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: r["id"])


def _same_rows(what: str, got: list[dict[str, Any]]) -> str:
    """Raise unless ``got`` holds exactly the expected rows once each; return a one-line summary."""
    want = expected_rows()
    if len(got) != len(want):
        raise AssertionError(f"{what}: {len(got)} rows, expected {len(want)}")
    got_sorted = _sorted(got)
    if got_sorted != want:
        bad = next(i for i, (g, w) in enumerate(zip(got_sorted, want, strict=True)) if g != w)
        raise AssertionError(f"{what}: row {bad} is {got_sorted[bad]!r}, expected {want[bad]!r}")
    return f"{len(got)}/{len(want)} rows, content equal"


def read_bodies(endpoint: str, basin: str, stream: str) -> list[dict[str, Any]]:
    """Every data record of ``stream``, JSON-decoded, read with the SDK up to the tail."""
    from s2_sdk import S2, Endpoints, ReadLimit, SeqNum

    async def main() -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        async with S2("test", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
            handle = s2.basin(basin).stream(stream)
            tail = (await handle.check_tail()).seq_num
            pos = 0
            while pos < tail:
                batch = await handle.read(start=SeqNum(pos), limit=ReadLimit(count=1000))
                if not batch.records:
                    break
                out.extend(json.loads(r.body) for r in batch.records if not r.is_command_record())
                pos = batch.records[-1].seq_num + 1
        return out

    return asyncio.run(main())


class CrashPlan:
    """The leg's crash plan file (``S2SINK_CRASH_PLAN``, set before Spark starts its Python workers), armed
    with one rule at a time. Each rule gets a new index, so a marker left by an earlier one cannot hold it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.used = 0
        self.disarm()

    def arm(self, rule: dict[str, Any]) -> int:
        index = self.used
        self.used += 1
        rules = [{"point": "unused"}] * index + [rule]
        self.path.write_text(json.dumps({"rules": rules}))
        return index

    def disarm(self) -> None:
        self.path.write_text(json.dumps({"rules": []}))

    def fired(self, index: int) -> bool:
        return bool(glob.glob(f"{self.path}.fired.{index}.*"))


# Micro-batch 1 (the second file, one partition of 1,000 rows in appends of 100): the worker dies after its
# third append went out and before the ack, so that append most likely landed and the retry must subtract it.
KILL_WORKER_MID_BATCH: dict[str, Any] = {
    "point": "after_append_before_ack",
    "batch": 1,
    "partition": 0,
    "chunk": 2,
    "action": "exit",
}


class Smoke:
    """The checks of one leg, sharing one lite server, one Spark session and one basin."""

    def __init__(
        self, spark: Any, endpoint: str, basin: str, work: Path, crashes: CrashPlan, *, connect: bool = False
    ) -> None:
        self.spark = spark
        self.connect = connect
        self.restarts = 0  # queries started again after their foreachBatch process missed its start-up window
        self.endpoint = endpoint
        self.basin = basin
        self.work = work
        self.crashes = crashes
        self.source = work / "source"
        _write_source(self.source)

    def _with_worker_killed(self, what: str, stream: str, run: Callable[[], None]) -> str:
        index = self.crashes.arm(KILL_WORKER_MID_BATCH)
        try:
            run()
        finally:
            self.crashes.disarm()
        if not self.crashes.fired(index):
            raise AssertionError(f"{what}: the crash point did not fire, so the check proves nothing")
        verdict = _same_rows(what, read_bodies(self.endpoint, self.basin, stream))
        return f"{verdict}, after its Python worker was killed mid-batch and the task retried"

    def options(self, **extra: str) -> dict[str, str]:
        """format("s2") options pointing at the lite server's basin."""
        return {
            "s2.basin": self.basin,
            "s2.endpoints.account": self.endpoint,
            "s2.endpoints.basin": self.endpoint,
            **extra,
        }

    def stream_of_files(self) -> Any:
        """A streaming DataFrame over the source folder: one micro-batch per file."""
        return self.spark.readStream.schema(SCHEMA_DDL).option("maxFilesPerTrigger", 1).json(str(self.source))

    def _run(self, query: Any) -> None:
        query.awaitTermination(300)
        if query.isActive:
            query.stop()
            raise AssertionError("the availableNow query did not finish within 300 s")
        if query.exception() is not None:
            raise AssertionError(f"the query failed: {query.exception()}")

    def _foreach_batch_query(self, stream: str, **cfg_extra: Any) -> None:
        import s2_sink
        from s2_sink.encoders import InsertEncoder

        cfg = s2_sink.S2Config(
            basin=self.basin,
            stream=stream,
            account_endpoint=self.endpoint,
            basin_endpoint=self.endpoint,
            # The checks kill a task's Python worker mid-batch: the executors' path, not a small batch
            # written from the driver (whose crash point would end the smoke itself).
            driver_write_max_rows=0,
            **cfg_extra,
        )
        # Exactly-once (the default); under Connect the query id cannot be read where foreachBatch runs.
        writer_id = f"compat-{stream}" if self.connect else None
        writer = s2_sink.S2Writer(cfg, InsertEncoder(), writer_id=writer_id)
        start = (
            self.stream_of_files()
            .writeStream.foreachBatch(writer)
            .option("checkpointLocation", str(self.work / f"ckpt-{stream}"))
            .trigger(availableNow=True)
            .start
        )
        for attempt in range(3):
            try:
                query = start()
                break
            except Exception as exc:
                # A Connect server gives the Python process it starts for foreachBatch 10 s to connect back
                # (fixed in Spark); under a load average of 18 on 2 cores it missed that twice in a row,
                # before any batch ran. Start again, as the next scheduled run would; anything else fails.
                if not self.connect or "failed to connect back" not in str(exc) or attempt == 2:
                    raise
                _log("the foreachBatch process missed the server's 10 s start-up window; starting again")
                self.restarts += 1
        self._run(query)

    def foreach_batch_s2writer(self) -> str:
        self._foreach_batch_query("fb")
        return _same_rows("foreachBatch(S2Writer)", read_bodies(self.endpoint, self.basin, "fb"))

    def foreach_batch_two_scheduled_runs(self) -> str:
        """Two availableNow runs of one query from one checkpoint, the last file landing between them (the
        serverless job shape): every row once."""
        landing = self.work / "landing"
        landing.mkdir()
        files = sorted(self.source.iterdir())
        for f in files[:-1]:
            (landing / f.name).write_bytes(f.read_bytes())
        original, self.source = self.source, landing
        try:
            self._foreach_batch_query("runs")
            (landing / files[-1].name).write_bytes(files[-1].read_bytes())
            self._foreach_batch_query("runs")
        finally:
            self.source = original
        verdict = _same_rows("two scheduled runs", read_bodies(self.endpoint, self.basin, "runs"))
        return verdict + (f" ({self.restarts} start(s) retried)" if self.restarts else "")

    def foreach_batch_s2writer_worker_killed(self) -> str:
        def run() -> None:
            self._foreach_batch_query("fb-retry", batch_max_records=100)

        return self._with_worker_killed("foreachBatch(S2Writer)", "fb-retry", run)

    def register_refused(self) -> str:
        import s2_sink

        try:
            s2_sink.register(self.spark)
        except s2_sink.S2SinkError as exc:
            return _expect_words(str(exc), [_pyspark_version(), "foreachBatch(S2Writer"])
        raise AssertionError("s2_sink.register succeeded on a pyspark without the data source API")

    def format_batch_write(self) -> str:
        df = self.spark.read.schema(SCHEMA_DDL).json(str(self.source))
        df.write.format("s2").mode("append").options(**self.options(**{"s2.stream": "ds"})).save()
        return _same_rows("df.write.format('s2')", read_bodies(self.endpoint, self.basin, "ds"))

    def format_batch_read(self) -> str:
        opts = self.options(**{"s2.stream": "ds", "s2.format": "json"})
        df = self.spark.read.format("s2").schema(SCHEMA_DDL).options(**opts).load()
        return _same_rows("spark.read.format('s2')", [r.asDict() for r in df.collect()])

    def format_stream_read(self) -> str:
        opts = self.options(**{"s2.stream": "ds", "s2.format": "json"})
        query = (
            self.spark.readStream.format("s2")
            .schema(SCHEMA_DDL)
            .options(**opts)
            .load()
            .writeStream.format("memory")
            .queryName("s2_stream_read")
            .option("checkpointLocation", str(self.work / "ckpt-read"))
            .trigger(availableNow=True)
            .start()
        )
        self._run(query)
        rows = [r.asDict() for r in self.spark.table("s2_stream_read").collect()]
        return _same_rows("spark.readStream.format('s2')", rows)

    def _stream_write_query(self, stream: str = "dss", **extra: str) -> Any:
        return (
            self.stream_of_files()
            .writeStream.format("s2")
            .options(**self.options(**{"s2.stream": stream, **extra}))
            .option("checkpointLocation", str(self.work / f"ckpt-{stream}"))
            .trigger(availableNow=True)
            .start()
        )

    def format_stream_write(self) -> str:
        self._run(self._stream_write_query())
        return _same_rows("writeStream.format('s2')", read_bodies(self.endpoint, self.basin, "dss"))

    def format_stream_write_worker_killed(self) -> str:
        def run() -> None:
            self._run(self._stream_write_query("dss-retry", **{"sink.batch.max-size": "100"}))

        return self._with_worker_killed("writeStream.format('s2')", "dss-retry", run)

    def format_stream_write_refused(self) -> str:
        try:
            query = self._stream_write_query()
            query.awaitTermination(300)
            error = query.exception()
        except Exception as exc:  # Spark wraps the driver-side Python error in its own exception types
            error = exc
        if error is None:
            raise AssertionError("writeStream.format('s2') ran on a pyspark without the Arrow stream writer")
        return _expect_words(str(error), ["needs pyspark 4.1", _pyspark_version(), "foreachBatch(S2Writer"])


def _expect_words(message: str, words: list[str]) -> str:
    missing = [w for w in words if w not in message]
    if missing:
        raise AssertionError(f"the error does not say {missing}: {message[:600]}")
    return f"refused with a clear error: {message.splitlines()[0][:160]}"


def _pyspark_version() -> str:
    import pyspark

    return str(pyspark.__version__)


def _versions() -> dict[str, str]:
    out = {"python": ".".join(map(str, sys.version_info[:3]))}
    for dist in ("pyspark", "s2-sink", "s2-sdk", "protobuf", "grpcio-status", "pyarrow", "numpy", "pandas"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "-"
    return out


def _session() -> Any:
    from pyspark.sql import SparkSession

    # Executors must run this virtualenv's interpreter, not whatever python is on PATH.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    # local[2,4]: two threads, and a failed task is retried (up to 4 attempts) as on a cluster.
    builder = SparkSession.builder.master("local[2,4]").appName("s2-sink-compat")
    for key, value in {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.session.timeZone": "UTC",
    }.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _client_checks(endpoint: str, basin: str) -> list[tuple[str, Callable[[], str]]]:
    """The Spark Connect client environment without a server (``--client``)."""

    def protos() -> str:
        import google.protobuf
        from pyspark.sql.connect import proto
        from pyspark.sql.connect.client import SparkConnectClient

        plan = proto.Plan(root=proto.Relation(range=proto.Range(start=0, end=10, step=1)))
        if proto.Plan.FromString(plan.SerializeToString()) != plan:
            raise AssertionError("a Spark Connect plan did not survive a protobuf round trip")
        SparkConnectClient("sc://127.0.0.1:15002")  # builds the gRPC channel; connects lazily
        return f"Spark Connect protos and client load under protobuf {google.protobuf.__version__}"

    def sdk_round_trip() -> str:
        from s2_sdk import S2, AppendInput, Endpoints, Record

        async def append() -> None:
            async with S2("test", endpoints=Endpoints(account=endpoint, basin=endpoint)) as s2:
                rows = [json.dumps(r).encode() for r in expected_rows()]
                for i in range(0, len(rows), 1000):
                    await (
                        s2.basin(basin)
                        .stream("sdk")
                        .append(AppendInput([Record(b) for b in rows[i : i + 1000]]))
                    )

        asyncio.run(append())
        return _same_rows("SDK append and read", read_bodies(endpoint, basin, "sdk"))

    return [("client: Spark Connect protos", protos), ("client: S2 SDK round trip", sdk_round_trip)]


def _connect_session() -> Any:
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    builder = SparkSession.builder.remote("local[2]")
    for key, value in {"spark.sql.shuffle.partitions": "2", "spark.sql.session.timeZone": "UTC"}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def _connect_plan(smoke: Smoke) -> list[tuple[str, Callable[[], str]]]:
    """The Spark Connect shape: the scheduled foreachBatch job, and format("s2") where the API exists."""
    from s2_sink.datasource._compat import HAS_DATASOURCE_API

    checks = [("connect: foreachBatch(S2Writer), two runs", smoke.foreach_batch_two_scheduled_runs)]
    if HAS_DATASOURCE_API:
        import s2_sink

        s2_sink.register(smoke.spark)
        checks += [
            ("connect: format batch write", smoke.format_batch_write),
            ("connect: format batch read", smoke.format_batch_read),
        ]
    return checks


def _plan(smoke: Smoke) -> list[tuple[str, Callable[[], str]]]:
    """The checks this pyspark supports, plus the refusals it must make clearly."""
    from s2_sink.datasource._compat import HAS_DATASOURCE_API, HAS_STREAM_ARROW_WRITER

    if smoke.connect:
        return _connect_plan(smoke)
    checks: list[tuple[str, Callable[[], str]]] = [
        ("foreachBatch(S2Writer)", smoke.foreach_batch_s2writer),
        ("foreachBatch(S2Writer), worker killed", smoke.foreach_batch_s2writer_worker_killed),
    ]
    if not HAS_DATASOURCE_API:
        return [*checks, ("register refused", smoke.register_refused)]
    import s2_sink

    s2_sink.register(smoke.spark)
    checks += [
        ("format batch write", smoke.format_batch_write),
        ("format batch read", smoke.format_batch_read),
        ("format stream read", smoke.format_stream_read),
    ]
    if HAS_STREAM_ARROW_WRITER:
        checks.append(("format stream write", smoke.format_stream_write))
        checks.append(("format stream write, worker killed", smoke.format_stream_write_worker_killed))
    else:
        checks.append(("format stream write refused", smoke.format_stream_write_refused))
    return checks


def main() -> int:
    connect = "--connect" in sys.argv[1:]
    client_only = "--client" in sys.argv[1:]
    quick = "--quick" in sys.argv[1:]
    import s2_sink
    from s2_sink.lite import LiteServer
    from s2_sink.testing import fresh_basin

    report: dict[str, Any] = {"versions": _versions(), "package": s2_sink.__file__, "checks": []}
    report["versions"]["session"] = "client" if client_only else "connect" if connect else "classic"
    if not s2_sink.__file__ or not s2_sink.__file__.startswith(sys.prefix):
        raise SystemExit(f"s2_sink was imported from {s2_sink.__file__}, not from this virtualenv")
    with tempfile.TemporaryDirectory(prefix="s2-compat-") as tmp, LiteServer() as srv:
        crashes = CrashPlan(Path(tmp) / "crash-plan.json")
        os.environ["S2SINK_CRASH_PLAN"] = str(crashes.path)  # before Spark starts its Python workers
        basin = fresh_basin(srv.endpoint)
        spark = None if client_only else _connect_session() if connect else _session()
        try:
            if spark is None:
                plan = _client_checks(srv.endpoint, basin)
            else:
                plan = _plan(Smoke(spark, srv.endpoint, basin, Path(tmp), crashes, connect=connect))
            plan = [(name, check) for name, check in plan if not (quick and "worker killed" in name)]
            for name, check in plan:
                started = time.monotonic()
                _log(f"{name} ...")
                try:
                    detail, ok = check(), True
                except Exception as exc:
                    detail, ok = f"{type(exc).__name__}: {exc}"[:2000], False
                    traceback.print_exc(file=sys.stderr)
                seconds = round(time.monotonic() - started, 1)
                _log(f"{name}: {'ok' if ok else 'FAILED'} ({seconds} s) {detail[:300]}")
                report["checks"].append({"name": name, "ok": ok, "seconds": seconds, "detail": detail})
        finally:
            if spark is not None:
                spark.stop()
    print(json.dumps(report))
    return 0 if all(c["ok"] for c in report["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
