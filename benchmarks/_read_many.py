"""Reading many small streams (the ``read_many`` section of ``benchmarks.run``).

The same records written by ``S2Writer`` (untimed, at-least-once) into one stream and routed by a column
to ``streams`` streams of ``rows_per_stream`` records each, then read back with ``spark.read.format("s2")``:
the one stream by ``s2.stream``, the many by ``s2.stream-prefix``, each action on a DataFrame loaded for it,
as a job reads: Spark plans a DataFrame's read once, at its first action (the listing and every stream's
tail, on the driver), and its later actions reuse that plan. Two actions per reader: ``count()``, and
an aggregate over every row's columns (records, distinct streams, sum of seq_nums and of body lengths),
checked against what was written. The two readers alternate per round (ABBA); client CPU (Python + JVM) per
record is summed over the rounds, wall time is their median.

Target (issue "many streams", reads): 1,000 streams, client CPU per record <= 2x one stream's.
"""

from __future__ import annotations

import statistics
import uuid
from typing import TYPE_CHECKING, Any

from benchmarks._data import dataset
from benchmarks._routed import _frame, _writer

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from benchmarks._cases import Ctx
    from benchmarks._procs import ProcessMeter

__all__ = ["READ_MANY_TARGET", "read_many"]

READ_MANY_TARGET = 2.0
_READERS = ("one", "routed")
_ACTIONS = ("count", "aggregate")


def _reader(ctx: Ctx, key: str, prefix: str) -> DataFrame:
    r = (
        ctx.spark.read.format("s2")
        .option("s2.basin", ctx.basin)
        .option("s2.endpoints.account", ctx.endpoint)
        .option("s2.endpoints.basin", ctx.endpoint)
    )
    r = r.option("s2.stream-prefix", prefix) if key == "routed" else r.option("s2.stream", prefix)
    return r.load()


def _act(df: DataFrame, action: str) -> tuple[int, ...]:
    from pyspark.sql import functions as F

    if action == "count":
        return (df.count(),)
    row = df.agg(
        F.count("*"), F.countDistinct("stream"), F.sum("seq_num"), F.sum(F.octet_length("body"))
    ).collect()[0]
    return tuple(int(v or 0) for v in row)


def read_many(
    meter: ProcessMeter, ctx: Ctx, *, streams: int, rows_per_stream: int, rounds: int
) -> dict[str, Any]:
    """Per reader and action: client CPU per record and median wall time over ``rounds`` rounds."""
    from s2_sink.datasource import S2DataSource

    ctx.spark.dataSource.register(S2DataSource)
    rows = streams * rows_per_stream
    base = dataset(ctx.spark, rows, 2).cache()
    base.count()
    prefixes = {key: f"rm{i}-{uuid.uuid4().hex[:6]}-" for i, key in enumerate(_READERS)}
    try:
        for key in _READERS:  # untimed: the records to read
            _writer(ctx, key, "at-least-once", prefixes[key])(_frame(base, key, prefixes[key], streams), 0)
    finally:
        base.unpersist()
    seen: dict[tuple[str, str], tuple[int, ...]] = {}
    for key in _READERS:  # untimed: a first read of each (worker start, imports), and the expected answers
        for action in _ACTIONS:
            seen[key, action] = _act(_reader(ctx, key, prefixes[key]), action)
    usage: dict[tuple[str, str], list[Any]] = {(k, a): [] for k in _READERS for a in _ACTIONS}
    for r in range(rounds):
        order = list(_READERS) if r % 2 == 0 else list(reversed(_READERS))
        for key in order:
            for action in _ACTIONS:
                meter.start()
                got = _act(_reader(ctx, key, prefixes[key]), action)
                usage[key, action].append(meter.stop())
                if got != seen[key, action]:
                    raise RuntimeError(f"read_many {key} {action}: {got} then {seen[key, action]}")
    for key in _READERS:
        n = seen[key, "count"][0]
        if n != rows:
            raise RuntimeError(f"read_many {key}: read {n:,} records, wrote {rows:,}")
    distinct = seen["routed", "aggregate"][1]
    if distinct != streams:
        raise RuntimeError(f"read_many routed: records of {distinct:,} streams, wrote {streams:,}")
    out: dict[str, Any] = {}
    for (key, action), us in usage.items():
        n = rows * len(us)
        out[f"{key}_{action}"] = {
            "streams": streams if key == "routed" else 1,
            "median_s": statistics.median(u.wall_s for u in us),
            "py_cpu_us_per_rec": sum(u.worker_cpu_s + u.driver_cpu_s for u in us) / n * 1e6,
            "jvm_cpu_us_per_rec": sum(u.jvm_cpu_s for u in us) / n * 1e6,
            "client_cpu_us_per_rec": sum(_client_s(u) for u in us) / n * 1e6,
            "lite_cpu_us_per_rec": sum(u.lite_cpu_s for u in us) / n * 1e6,
        }
    result: dict[str, Any] = {
        "label": f"spark.read.format('s2') of {rows:,} records: 1 stream vs {streams:,} streams "
        f"({rows_per_stream:,} records each, s2.stream-prefix)",
        "streams": streams,
        "rows_per_stream": rows_per_stream,
        "records": rows,
        "rounds": rounds,
        "readers": out,
        "target": READ_MANY_TARGET,
    }
    for action in _ACTIONS:
        one, many = out[f"one_{action}"], out[f"routed_{action}"]
        result[f"ratio_{action}"] = many["client_cpu_us_per_rec"] / one["client_cpu_us_per_rec"]
        result[f"wall_ratio_{action}"] = many["median_s"] / one["median_s"]
    return result


def _client_s(u: Any) -> float:
    return float(u.worker_cpu_s + u.driver_cpu_s + u.jvm_cpu_s)


def read_many_targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The section's targets: many streams over one, client CPU per record, per action."""
    ok = r.get("status") == "ok"
    out = []
    for action in _ACTIONS:
        v = r[f"ratio_{action}"] if ok else None
        why = (
            f"{r['streams']:,} streams x {r['rows_per_stream']:,} records; "
            f"wall {r[f'wall_ratio_{action}']:.2f}x"
            if ok
            else str(r.get("reason", ""))
        )
        status = "n/a" if v is None else ("pass" if v <= READ_MANY_TARGET else "fail")
        out.append(
            {
                "name": 'spark.read.format("s2") of many streams / one stream, client CPU per record, '
                + action,
                "value": v,
                "unit": "x",
                "bound": f"<= {READ_MANY_TARGET}x",
                "status": status,
                "note": why,
            }
        )
    return out


def read_many_lines(r: dict[str, Any]) -> list[str]:
    """The section's rows in the printed table."""
    if r.get("status") != "ok":
        return [f"read_many: {r.get('status', 'n/a').upper()}: {r.get('reason', '')}"]
    lines = [
        f"read_many ({r['label']}; {r['rounds']} measured round(s) after an untimed first):",
        f"  {'reader':<18} {'streams':>7} {'median s':>8} {'py us/rec':>9} {'jvm us':>7} {'client us':>9} "
        f"{'lite us':>7}",
    ]
    for key, w in r["readers"].items():
        lines.append(
            f"  {key:<18} {w['streams']:>7,} {w['median_s']:>8.2f} {w['py_cpu_us_per_rec']:>9.2f} "
            f"{w['jvm_cpu_us_per_rec']:>7.2f} {w['client_cpu_us_per_rec']:>9.2f} "
            f"{w['lite_cpu_us_per_rec']:>7.2f}"
        )
    return lines
