"""Entry point: ``python -m benchmarks.run [--quick]``. Prints the table, writes results.json and results.png.

Every case writes the same cached DataFrame, in one run, into a lite server running in its own process, so the
ratios between cases mean something even on a shared, noisy machine (the absolute numbers do not travel).
The sink's CPU per record is its client CPU, Python (workers + driver) and JVM; the lite server's CPU is
measured apart, from its own process, and reported beside it as no target (it stands in for S2).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks import _s2
from benchmarks._cases import CASES, Case, Ctx, NotAvailable
from benchmarks._data import DATASETS, dataset, json_body
from benchmarks._format_sink import format_sink
from benchmarks._lite import LiteProcess, ingest_rate, lite_process
from benchmarks._procs import ProcessMeter
from benchmarks._read_many import read_many
from benchmarks._report import chart, table, targets
from benchmarks._routed import routed
from benchmarks._shape import production_shape
from benchmarks._streaming import Sink, latency, summarize

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent

FULL = {
    "rows": 2_000_000,
    "big_rows": 5_000_000,
    "stream_batches": 60,
    "stream_warmup": 5,
    "ingest_records": 1_000_000,
    "streams": 1000,
    "rows_per_stream": 100,
    "routed_batches": 3,
    "read_rounds": 3,
}
# The parts of a run besides the cases, in run order; `--only` names them like cases.
SECTIONS = (
    "streaming",
    "format_streaming",
    "single_partition",
    "diagnostics",
    "lite_ingest",
    "shape",
    "routed",
    "read_many",
)
SKIPPED = {"status": "skipped", "reason": "not selected with --only"}

QUICK = {
    "rows": 10_000,
    "big_rows": 20_000,
    "stream_batches": 3,
    "stream_warmup": 1,
    "ingest_records": 20_000,
    "streams": 50,
    "rows_per_stream": 100,
    "routed_batches": 1,
    "read_rounds": 1,
}


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes: every section runs, its numbers no guide (~160 CPU-seconds)",
    )
    p.add_argument("--rows", type=int, help="rows of the main DataFrame (default 2M, quick 20k)")
    p.add_argument("--partitions", type=int, default=2, help="partitions of the main DataFrame (default 2)")
    p.add_argument(
        "--data",
        default="events",
        choices=DATASETS,
        metavar="DATASET",
        help="the rows every case writes: events (default: 5 columns, ~150 JSON bytes), wide (two longs, a "
        "constant string, a timestamp, a 64-character hex string) or type:T (an id and one column of "
        f"Spark type T: {', '.join(d.removeprefix('type:') for d in DATASETS[2:])})",
    )
    p.add_argument("--big-rows", type=int, help="rows of the single-partition memory case (default 5M)")
    p.add_argument("--stream-batches", type=int, help="measured micro-batches per streaming sink")
    p.add_argument(
        "--streams",
        type=int,
        help="the routed section: streams a micro-batch is routed to (default 1000, quick 50)",
    )
    p.add_argument(
        "--rows-per-stream",
        type=int,
        help="the routed section: rows per stream per micro-batch (default 100)",
    )
    p.add_argument(
        "--routed-batches",
        type=int,
        help="the routed section: measured micro-batches per writer, after an untimed first "
        "(default 3, quick 1)",
    )
    p.add_argument(
        "--read-rounds",
        type=int,
        help="the read_many section (--streams x --rows-per-stream records): measured rounds (default 3)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        help="rounds over the cases, in alternating order (ABBA, so a drifting machine load evens out); "
        "each case keeps its fastest round (default 2, quick 1)",
    )
    p.add_argument(
        "--only",
        help="comma-separated case keys to run (others are reported as skipped), and the sections to run "
        f"besides the cases: {', '.join(SECTIONS)} (with --only, a section not named is skipped); "
        "e.g. --only single_partition --big-rows 5000000 measures only the memory case",
    )
    p.add_argument("--out", default=str(HERE), help="directory for results.json and results.png")
    p.add_argument(
        "--lite-from",
        metavar="CHECKOUT",
        help="run the lite server of another checkout of this repository (e.g. a git worktree of an older "
        "commit), so two versions of the sink are measured against one server",
    )
    p.add_argument(
        "--render",
        metavar="RESULTS_JSON",
        help="measure nothing: recompute the targets of a results.json, print its table, redraw its PNG",
    )
    return p.parse_args(argv)


def _spark() -> Any:
    # Workers must run this interpreter (pyarrow, s2-sdk) and import `benchmarks` for the pickled functions.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("s2_sink-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "4g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _git_commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


_CLOCK = {"t0": time.monotonic()}


def _log(msg: str) -> None:
    """Progress line with the seconds since the run started (shows where a slow run spends its time)."""
    print(f"[{time.monotonic() - _CLOCK['t0']:6.1f}s] {msg}", flush=True)


def _reason(exc: BaseException) -> str:
    """One line: the exception's type and first line, plus the last line when it wraps a traceback."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()] or [""]
    text = f"{type(exc).__name__}: {lines[0][:200]}"
    if len(lines) > 1:
        text += f" ... {lines[-1][:200]}"
    return text


def _measure(meter: ProcessMeter, ctx: Ctx, case: Case) -> dict[str, Any]:
    prepared = case.prepare(ctx)
    gc.collect()
    meter.start()
    try:
        prepared.action()
    finally:
        usage = meter.stop()
        if prepared.cleanup:
            prepared.cleanup()
    streams = list(prepared.streams)
    if prepared.stream_prefix:
        streams += _s2.list_streams(ctx.endpoint, ctx.basin, prepared.stream_prefix)
    read_back: str = "-"
    if streams:
        held = _s2.data_records(ctx.endpoint, ctx.basin, streams)
        good = held >= ctx.rows if prepared.at_least_once else held == ctx.rows
        read_back = f"{held:,} records" + ("" if good else f" (MISMATCH: expected {ctx.rows:,})")
        if not good:
            raise RuntimeError(f"{case.key}: streams hold {held:,} records, expected {ctx.rows:,}")
    n = ctx.rows
    return {
        "status": "ok",
        "reason": "",
        "note": prepared.note,
        "rows": n,
        "seconds": usage.wall_s,
        "rows_per_s": n / usage.wall_s,
        "py_cpu_us_per_rec": (usage.worker_cpu_s + usage.driver_cpu_s) / n * 1e6,
        "worker_cpu_us_per_rec": usage.worker_cpu_s / n * 1e6,
        "driver_cpu_us_per_rec": usage.driver_cpu_s / n * 1e6,
        "jvm_cpu_us_per_rec": usage.jvm_cpu_s / n * 1e6,
        "lite_cpu_us_per_rec": usage.lite_cpu_s / n * 1e6,
        "worker_peak_rss_mib": usage.worker_peak_rss_mib,
        "driver_peak_rss_mib": usage.driver_peak_rss_mib,
        "read_back": read_back,
    }


def _run_cases(
    meter: ProcessMeter, ctx: Ctx, bytes_per_row: float, repeat: int, only: set[str] | None
) -> list[dict[str, Any]]:
    best: dict[str, dict[str, Any]] = {}
    for rnd in range(repeat):
        for case in CASES if rnd % 2 == 0 else tuple(reversed(CASES)):
            if only is not None and case.key not in only:
                best[case.key] = {"status": "skipped", "reason": "not selected with --only"}
                continue
            prior = best.get(case.key)
            if prior is not None and prior["status"] != "ok":
                continue
            _log(f"  [{rnd + 1}/{repeat}] {case.key} ...")
            try:
                res = _measure(meter, ctx, case)
            except NotAvailable as exc:
                res = {"status": "not available", "reason": str(exc)}
            except Exception as exc:
                res = {"status": "error", "reason": _reason(exc)}
            if prior is None or res.get("rows_per_s", 0) > prior.get("rows_per_s", 0):
                best[case.key] = res
    out = []
    for i, case in enumerate(CASES, start=1):
        out.append({"index": i, "key": case.key, "label": case.label, **best[case.key]})
    ref = {c["key"]: c for c in out if c["status"] == "ok"}
    for c in out:
        if c["status"] != "ok":
            continue
        for name, key in (("vs_json", "json"), ("vs_naive", "naive")):
            c[name] = c["rows_per_s"] / ref[key]["rows_per_s"] if key in ref else None
        # MB/s of the JSON rows written (the same bytes in every case; upsert records add the key).
        c["mb_per_s"] = c["rows_per_s"] * bytes_per_row / 1e6
    return out


def _streaming(spark: Any, ctx: Ctx, sizes: dict[str, int]) -> dict[str, Any]:
    from benchmarks._cases import _encoder, _writer

    def noop(df: Any, _bid: int) -> None:
        # Spark's own encoding of the rows (to_json) into its noop sink: the JVM's share of any sink.
        json_body(df).write.format("noop").mode("overwrite").save()

    stream = f"lat-naive-{uuid.uuid4().hex[:8]}"
    _s2.ensure(ctx.endpoint, ctx.basin, [stream])
    naive_write = _s2.naive_foreach_batch(ctx.endpoint, ctx.basin, stream)

    def naive(df: Any, bid: int) -> None:
        naive_write(json_body(df), bid)

    def python_noop(df: Any, _bid: int) -> None:
        # The floor of any Python-task sink: one mapInArrow task that only counts the rows.
        df.mapInArrow(_s2.count_rows, "n long").collect()

    sinks: dict[str, Sink] = {"noop": noop, "python_noop": python_noop, "naive": naive}
    out: dict[str, Any] = {}
    for key, delivery, extra in (
        ("s2writer", "at-least-once", {}),
        ("s2writer_eo", "exactly-once", {}),
        # The same writer with the driver path off: what the Python tasks cost a 1k-row batch.
        ("s2writer_eo_tasks", "exactly-once", {"driver_write_max_rows": 0}),
    ):
        try:
            sinks[key] = _writer(
                ctx, f"lat-{key}-{uuid.uuid4().hex[:8]}", _encoder("insert"), delivery, **extra
            )
        except NotAvailable as exc:
            out[key] = {"status": "not available", "reason": str(exc)}
    _log(f"  streaming: {', '.join(sinks)} on the same 1k-row micro-batches ...")
    try:
        durations, errors = latency(
            spark,
            sinks,
            batches=sizes["stream_batches"],
            warmup=sizes["stream_warmup"],
            rows_per_batch=1000,
            tmp=ctx.tmp,
        )
    except Exception as exc:
        reason = _reason(exc)
        return {"rows_per_batch": 1000, "sinks": {k: {"status": "error", "reason": reason} for k in sinks}}
    for key in sinks:
        if key in errors:
            out[key] = {"status": "error", "reason": errors[key]}
        else:
            out[key] = summarize(durations[key])
    order = ["noop", "python_noop", "naive", "s2writer", "s2writer_eo", "s2writer_eo_tasks"]
    return {
        "rows_per_batch": 1000,
        "sinks": {k: out[k] for k in order},
        "beyond_noop": _beyond(out, durations, "noop"),
        "beyond_python_noop": _beyond(out, durations, "python_noop"),
    }


def _beyond(out: dict[str, Any], durations: dict[str, list[float]], base: str) -> dict[str, Any]:
    """Per batch, each sink's time minus `base`'s time on the same batch; median and p99 of those."""
    beyond: dict[str, Any] = {}
    if out[base]["status"] != "ok":
        return beyond
    for key, s in out.items():
        if key not in (base, "noop") and s["status"] == "ok":
            diff = summarize([a - b for a, b in zip(durations[key], durations[base], strict=True)])
            beyond[key] = {"median_ms": diff["median_ms"], "p99_ms": diff["p99_ms"]}
    return beyond


def _single_partition(spark: Any, meter: ProcessMeter, ctx: Ctx, rows: int) -> dict[str, Any]:
    from benchmarks._cases import _encoder, _writer

    try:
        stream = f"big-{uuid.uuid4().hex[:8]}"
        w = _writer(ctx, stream, _encoder("insert"), "at-least-once")
        warm = _writer(ctx, f"big-warm-{uuid.uuid4().hex[:8]}", _encoder("insert"), "at-least-once")
    except NotAvailable as exc:
        return {"status": "not available", "reason": str(exc), "rows": rows}
    # Untimed: start both Python workers and their imports, as the cases' rounds do for each other (run
    # alone with --only, the measured task would otherwise pay a worker's start-up, ~1 us per row at 5M).
    warm(dataset(spark, 2000, 2), 0)
    big = dataset(spark, rows, 1)
    gc.collect()
    meter.start()
    try:
        w(big, 0)
    except Exception as exc:
        meter.stop()
        return {"status": "error", "reason": _reason(exc), "rows": rows}
    usage = meter.stop()
    held = _s2.tail(ctx.endpoint, ctx.basin, [stream])
    return {
        "status": "ok",
        "rows": rows,
        "via": "S2Writer at-least-once",
        "seconds": usage.wall_s,
        "rows_per_s": rows / usage.wall_s,
        "worker_peak_rss_mib": usage.worker_peak_rss_mib,
        "py_cpu_us_per_rec": (usage.worker_cpu_s + usage.driver_cpu_s) / rows * 1e6,
        "read_back": held,
    }


def _python_task_floor(meter: ProcessMeter, ctx: Ctx) -> dict[str, Any]:
    """What any Python-task sink pays before its own work, on the rows S2Writer ships to its tasks: a
    ``mapInArrow`` that only counts rows (the Arrow transfer from the JVM, the same tasks), and PySpark's
    per-task ``importlib.invalidate_caches()`` timed inside the workers (`benchmarks._worker_probe`)."""
    from benchmarks._cases import _encoder, _writer
    from benchmarks._worker_probe import PROBE_DDL, invalidate_cost

    try:
        w = _writer(ctx, f"floor-{uuid.uuid4().hex[:8]}", _encoder("insert"), "at-least-once")
    except NotAvailable as exc:
        return {"status": "not available", "reason": str(exc)}
    frame, _ = w.rows(ctx.df)
    gc.collect()
    meter.start()
    try:
        counted = frame.mapInArrow(_s2.count_rows, "n long").collect()
    except Exception as exc:
        meter.stop()
        return {"status": "error", "reason": _reason(exc)}
    u = meter.stop()
    probes = frame.mapInArrow(invalidate_cost, PROBE_DDL).collect()
    n = ctx.rows
    per_task_ms = sum(p["invalidate_cpu_ms"] for p in probes) / len(probes)
    return {
        "status": "ok",
        "label": "a mapInArrow that only counts rows, over the rows S2Writer ships its tasks",
        "rows": sum(r["n"] for r in counted),
        "tasks": len(probes),
        "py_cpu_us_per_rec": (u.worker_cpu_s + u.driver_cpu_s) / n * 1e6,
        "invalidate_caches_cpu_ms_per_task": per_task_ms,
        "invalidate_caches_us_per_rec": per_task_ms * len(probes) / n * 1e3,
        "zipimporters": max(p["zipimporters"] for p in probes),
        "archives": probes[0]["archives"],
    }


def diagnostic_lines(results: dict[str, Any]) -> list[str]:
    """The diagnostics as printed lines (none when they were not run)."""
    f = results.get("diagnostics", {}).get("python_task_floor", {})
    if f.get("status") != "ok":
        return []
    return [
        f"diagnostic: {f['label']} ({f['tasks']} tasks): Python {f['py_cpu_us_per_rec']:.2f} us/rec; "
        f"PySpark's per-task importlib.invalidate_caches(): {f['invalidate_caches_cpu_ms_per_task']:.0f} "
        f"ms CPU per task in the worker = {f['invalidate_caches_us_per_rec']:.2f} us/rec here "
        f"({f['zipimporters']} zip importers over {f['archives']}; see benchmarks/_worker_probe.py)"
    ]


def _routed_section(meter: ProcessMeter, ctx: Ctx, sizes: dict[str, int]) -> dict[str, Any]:
    return _many_streams_section(
        lambda: routed(
            meter,
            ctx,
            streams=sizes["streams"],
            rows_per_stream=sizes["rows_per_stream"],
            batches=sizes["routed_batches"],
        )
    )


def _read_many_section(meter: ProcessMeter, ctx: Ctx, sizes: dict[str, int]) -> dict[str, Any]:
    return _many_streams_section(
        lambda: read_many(
            meter,
            ctx,
            streams=sizes["streams"],
            rows_per_stream=sizes["rows_per_stream"],
            rounds=sizes["read_rounds"],
        )
    )


def _many_streams_section(measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A many-streams section's result: its measures, or why there are none."""
    try:
        res = measure()
    except NotAvailable as exc:
        return {"status": "not available", "reason": str(exc)}
    except Exception as exc:
        return {"status": "error", "reason": _reason(exc)}
    return {"status": "ok", **res}


def _lite_ingest(lite: LiteProcess, records: int) -> dict[str, Any]:
    try:
        return {"status": "ok", **ingest_rate(lite, records)}
    except ImportError as exc:
        return {"status": "not available", "reason": f"lite ingest measurement not available ({exc})"}
    except Exception as exc:
        return {"status": "error", "reason": _reason(exc)}


def _render(path: Path) -> int:
    results = json.loads(path.read_text())
    results["targets"] = targets(results)
    path.write_text(json.dumps(results, indent=2, default=str) + "\n")
    chart(results, str(path.with_suffix(".png")))
    print(table(results))
    print("\n".join(diagnostic_lines(results)))
    return 0


def _format_streaming(spark: Any, ctx: Ctx, sizes: dict[str, int], *, quick: bool) -> list[dict[str, Any]]:
    """writeStream.format("s2"), exactly-once vs at-least-once: 1k-row batches (latency), 100k (volume)."""
    from s2_sink.datasource import S2DataSource

    spark.dataSource.register(S2DataSource)  # the format("s2") cases may not have run (--only)
    out: list[dict[str, Any]] = []
    for rows in (1000,) if quick else (1000, 100_000):
        batches = sizes["stream_batches"] if rows == 1000 else max(3, sizes["stream_batches"] // 4)
        _log(f"  writeStream.format('s2'), {rows:,}-row micro-batches, both deliveries (ABBA) ...")
        try:
            out.append(
                format_sink(
                    spark,
                    ctx.endpoint,
                    ctx.basin,
                    rows_per_batch=rows,
                    batches=batches,
                    warmup=sizes["stream_warmup"],
                    tmp=ctx.tmp,
                    abba=not quick,
                )
            )
        except Exception as exc:
            out.append({"rows_per_batch": rows, "status": "error", "reason": _reason(exc)})
    return out


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.render:
        return _render(Path(args.render))
    sizes = dict(QUICK if args.quick else FULL)
    if args.rows:
        sizes["rows"] = args.rows
    if args.big_rows:
        sizes["big_rows"] = args.big_rows
    for name in ("stream_batches", "streams", "rows_per_stream", "routed_batches", "read_rounds"):
        if getattr(args, name):
            sizes[name] = getattr(args, name)
    only = set(args.only.split(",")) if args.only else None

    def selected(section: str) -> bool:
        return only is None or section in only

    repeat = args.repeat or (1 if args.quick else 2)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = _CLOCK["t0"] = time.monotonic()
    load_start = os.getloadavg()[0]
    tmp = tempfile.mkdtemp(prefix="s2bench-")
    try:
        with lite_process(args.lite_from) as lite:
            _log(f"lite server pid {lite.pid} at {lite.endpoint}; starting Spark ...")
            spark = _spark()
            jvm_pid = spark.sparkContext._gateway.proc.pid
            meter = ProcessMeter(jvm_pid, lite.pid)
            from pyspark.sql import functions as F

            _log("Spark up; caching the dataset ...")
            df = dataset(spark, sizes["rows"], args.partitions, args.data).cache()
            body = json_body(df)
            agg = body.agg(F.count("*").alias("n"), F.avg(F.octet_length("value")).alias("b")).collect()[0]
            bytes_per_row = float(agg["b"])
            # Warm-up: JIT, Python worker start, Arrow paths.
            body.write.format("noop").mode("overwrite").save()
            basin = f"bench-{uuid.uuid4().hex[:12]}"
            _s2.ensure(lite.endpoint, basin, [])
            ctx = Ctx(spark=spark, df=df, rows=sizes["rows"], endpoint=lite.endpoint, basin=basin, tmp=tmp)
            _log(f"{sizes['rows']:,} rows cached ({bytes_per_row:.1f} JSON bytes/row); cases:")
            cases = _run_cases(meter, ctx, bytes_per_row, repeat, only)
            streaming = _streaming(spark, ctx, sizes) if selected("streaming") else dict(SKIPPED)
            format_streaming = (
                _format_streaming(spark, ctx, sizes, quick=args.quick) if selected("format_streaming") else []
            )
            single = dict(SKIPPED)
            if selected("single_partition"):
                _log(f"  single partition of {sizes['big_rows']:,} rows ...")
                single = _single_partition(spark, meter, ctx, sizes["big_rows"])
            diagnostics: dict[str, Any] = {}
            if not args.quick and selected("diagnostics"):
                _log("  diagnostics ...")
                diagnostics["python_task_floor"] = _python_task_floor(meter, ctx)
            shape = dict(SKIPPED)
            if selected("shape"):
                _log("  production shape: aggregation, many vs 2 input partitions, restarts ...")
                shape = production_shape(spark, ctx, quick=args.quick)
            many = dict(SKIPPED)
            if selected("routed"):
                _log(f"  routed: one stream vs {sizes['streams']:,} streams, both deliveries ...")
                many = _routed_section(meter, ctx, sizes)
            reads = dict(SKIPPED)
            if selected("read_many"):
                _log(f"  read_many: one stream vs {sizes['streams']:,} streams ...")
                reads = _read_many_section(meter, ctx, sizes)
            ingest = dict(SKIPPED)
            if selected("lite_ingest"):
                _log("  lite ingest ...")
                ingest = _lite_ingest(lite, sizes["ingest_records"])
            run_cpu_s = meter.total_cpu()
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    import pyspark

    results: dict[str, Any] = {
        "meta": {
            "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "cores": os.cpu_count(),
            "load_start": load_start,
            "load_end": os.getloadavg()[0],
            "rows": sizes["rows"],
            "partitions": args.partitions,
            "data": args.data,
            "json_bytes_per_row": bytes_per_row,
            "quick": args.quick,
            "repeat": repeat,
            "elapsed_s": time.monotonic() - started,
            # CPU of the whole run (JVM, Python workers, driver, lite server): on an idle machine the run
            # takes at least this divided by the cores; on a loaded one, much longer.
            "run_cpu_s": run_cpu_s,
            "spark": f"pyspark {pyspark.__version__}, classic, local[2]",
            "s2_sdk": importlib.metadata.version("s2-sdk"),
            "python": platform.python_version(),
            "commit": _git_commit(),
            "cpu_note": "Python CPU = Python workers below the JVM (incl. reaped ones) + driver process, "
            "from /proc/<pid>/stat; peak RSS = VmHWM reset per case via /proc/<pid>/clear_refs",
        },
        "cases": cases,
        "streaming": streaming,
        "format_streaming": format_streaming,
        "single_partition": single,
        "lite_ingest": ingest,
        "shape": shape,
        "routed": many,
        "read_many": reads,
        "diagnostics": diagnostics,
    }
    results["targets"] = targets(results)
    (out_dir / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    chart(results, str(out_dir / "results.png"))
    print()
    print(table(results))
    print("\n".join(diagnostic_lines(results)))
    took = time.monotonic() - started
    print(f"\nwrote {out_dir / 'results.json'} and {out_dir / 'results.png'} in {took:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
