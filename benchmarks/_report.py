"""Targets, the printed table and the chart, all computed from the results dict (what results.json holds)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from benchmarks._read_many import read_many_lines, read_many_targets

__all__ = ["chart", "client_cpu", "table", "targets"]

Result = dict[str, Any]


def _case(results: Result, key: str) -> Result | None:
    for c in results["cases"]:
        if c["key"] == key and c["status"] == "ok":
            return c  # type: ignore[no-any-return]
    return None


def _target(
    name: str, value: float | None, bound: str, ok: bool | None, unit: str, *, why: str = ""
) -> Result:
    status = "n/a" if value is None or ok is None else ("pass" if ok else "fail")
    return {"name": name, "value": value, "unit": unit, "bound": bound, "status": status, "note": why}


def client_cpu(c: Result) -> float:
    """The sink's CPU per record, its measure: Python (workers + driver) and the JVM. The lite server runs in
    its own process; its CPU (``lite_cpu_us_per_rec``) is reported apart and is no target."""
    return float(c["py_cpu_us_per_rec"] + c["jvm_cpu_us_per_rec"])


def _cpu_note(w: Result, other: Result, name: str) -> str:
    return (
        f"client CPU per record (Python + JVM) {client_cpu(w):.1f} us vs {name} {client_cpu(other):.1f} us "
        f"= {client_cpu(other) / client_cpu(w):.2f}x"
    )


def targets(results: Result) -> list[Result]:
    """The issue's targets, each pass / fail / n/a (n/a: the feature or measurement is not available)."""
    w = _case(results, "s2writer")
    eo = _case(results, "s2writer_eo")
    naive = _case(results, "naive")
    prod = _case(results, "producer")
    out: list[Result] = []

    upsert = _case(results, "s2writer_upsert")
    ds = _case(results, "datasource")
    read_json = _case(results, "read_json")
    read_s2 = _case(results, "read_s2")
    v = w["rows_per_s"] / naive["rows_per_s"] if w and naive else None
    why = _cpu_note(w, naive, "naive") if w and naive else ""
    out.append(_target("S2Writer vs naive foreachBatch", v, ">= 4.0x", v >= 4.0 if v else None, "x", why=why))
    v = w["rows_per_s"] / prod["rows_per_s"] if w and prod else None
    why = _cpu_note(w, prod, "Producer") if w and prod else ""
    out.append(_target("S2Writer vs per-row Producer", v, ">= 1.5x", v >= 1.5 if v else None, "x", why=why))
    v = w["py_cpu_us_per_rec"] if w else None
    out.append(
        _target(
            "S2Writer Python CPU per record (insert)",
            v,
            "<= 1.5 us",
            v <= 1.5 if v is not None else None,
            "us",
            why="Python workers + driver, encoding included",
        )
    )
    v = upsert["rows_per_s"] / w["rows_per_s"] if w and upsert else None
    why = _cpu_note(upsert, w, "insert") if w and upsert else ""
    out.append(_target("S2Writer upsert / insert", v, ">= 0.80x", v >= 0.8 if v else None, "x", why=why))
    ordered = _case(results, "s2writer_upsert_ordered")
    v = ordered["rows_per_s"] / w["rows_per_s"] if w and ordered else None
    why = _cpu_note(ordered, w, "insert") if w and ordered else ""
    out.append(
        _target(
            "S2Writer upsert with order_by, compact / insert",
            v,
            ">= 0.80x",
            v >= 0.8 if v else None,
            "x",
            why=why,
        )
    )
    v = ds["rows_per_s"] / w["rows_per_s"] if w and ds else None
    out.append(_target('format("s2") writer / S2Writer', v, ">= 0.90x", v >= 0.9 if v else None, "x"))
    v = read_s2["rows_per_s"] / read_json["rows_per_s"] if read_s2 and read_json else None
    why = _cpu_note(read_s2, read_json, "read.json") if read_s2 and read_json else ""
    out.append(
        _target(
            'spark.read.format("s2") / spark.read.json', v, ">= 0.50x", v >= 0.5 if v else None, "x", why=why
        )
    )
    v = eo["rows_per_s"] / w["rows_per_s"] if w and eo else None
    out.append(_target("exactly-once / at-least-once throughput", v, ">= 0.90", v >= 0.9 if v else None, "x"))
    sp = results.get("single_partition", {})
    v = sp.get("worker_peak_rss_mib") if sp.get("status") == "ok" else None
    out.append(
        _target(
            f"peak Python worker RSS, {sp.get('rows', 0):,}-row single partition",
            v,
            "<= 300 MiB",
            v <= 300 if v is not None else None,
            "MiB",
        )
    )
    st = results.get("streaming", {})
    beyond = st.get("beyond_noop", {}).get("s2writer")
    v = beyond["median_ms"] if beyond else None
    out.append(
        _target(
            "1k-row micro-batch sink latency beyond noop (median)",
            v,
            "<= 30 ms",
            v <= 30 if v is not None else None,
            "ms",
            why=_latency_note(st),
        )
    )
    beyond = st.get("beyond_noop", {}).get("s2writer_eo")
    v = beyond["median_ms"] if beyond else None
    tasks = st.get("beyond_noop", {}).get("s2writer_eo_tasks")
    why = f"task path (driver writes off): median {tasks['median_ms']:.1f} ms" if tasks else ""
    out.append(
        _target(
            "1k-row micro-batch exactly-once beyond noop (median)",
            v,
            "<= 30 ms",
            v <= 30 if v is not None else None,
            "ms",
            why=why,
        )
    )
    out.extend(_shape_targets(results.get("shape", {})))
    out.extend(_routed_targets(results.get("routed", {})))
    out.extend(read_many_targets(results.get("read_many", {})))
    return out


def _routed_targets(r: Result) -> list[Result]:
    """Routed to many streams over one stream, client CPU per row (`benchmarks._routed`), where measured."""
    ok = r.get("status") == "ok"
    out = []
    for suffix, delivery in (("", "at-least-once"), ("_eo", "exactly-once")):
        v = r[f"ratio{suffix}"] if ok else None
        why = (
            f"{r['streams']:,} streams x {r['rows_per_stream']:,} rows; "
            f"wall {r[f'wall_ratio{suffix}']:.2f}x; "
            f"{r[f'ms_per_stream{suffix}']:.2f} ms client CPU per stream beyond the rows"
            if ok
            else str(r.get("reason", ""))
        )
        out.append(
            _target(
                f"S2Writer routed to many streams / one stream, client CPU per row, {delivery}",
                v,
                f"<= {r.get('target', 2.0)}x",
                v <= r["target"] if v is not None else None,
                "x",
                why=why,
            )
        )
    return out


def _shape_targets(shape: Result) -> list[Result]:
    """The production-shape ratios (`benchmarks._shape`), where measured."""
    out = []
    agg, parts = shape.get("aggregation", {}), shape.get("partitions", {})
    states, rows, many = (
        agg.get("state_partitions", 200),
        parts.get("rows", 200_000),
        parts.get("input_partitions", 256),
    )
    for key, name, bound in (
        (
            "aggregation",
            f"{states}-partition update-mode aggregation, S2Writer upsert / noop (median batch)",
            1.3,
        ),
        (
            "partitions",
            f"{rows // 1000}k rows in {many} partitions / in 2 partitions (S2Writer exactly-once)",
            1.5,
        ),
    ):
        r = shape.get(key, {})
        ok = r.get("status") == "ok"
        tasks = f"write tasks {r['write_tasks']}" if ok else str(r.get("reason", ""))
        out.append(
            _target(
                name,
                r["ratio"] if ok else None,
                f"<= {bound}x",
                r["ratio"] <= bound if ok else None,
                "x",
                why=tasks,
            )
        )
    r = shape.get("restart", {})
    ok = r.get("status") == "ok"
    for key, name, bound in (
        ("restart", "scheduled availableNow job: restart (nothing in flight) / first run's batch", 1.5),
        ("recovery", "scheduled availableNow job: recovery / first run's batch", 2.0),
    ):
        why = f"median batch {r[key + '_ms']:.0f} ms vs first {r['first_ms']:.0f} ms" if ok else ""
        out.append(
            _target(
                name,
                r[key + "_ratio"] if ok else None,
                f"<= {bound}x",
                r[key + "_ratio"] <= bound if ok else None,
                "x",
                why=why or str(r.get("reason", "")),
            )
        )
    return out


def _latency_note(st: Result) -> str:
    beyond = st.get("beyond_noop", {}).get("s2writer")
    if not beyond:
        return ""
    note = f"p99 beyond noop {beyond['p99_ms']:.1f} ms"
    floor = st.get("beyond_python_noop", {}).get("s2writer")
    if floor:
        note += (
            f"; beyond a no-op Python task: median {floor['median_ms']:.1f} ms, p99 {floor['p99_ms']:.1f} ms"
        )
    return note


def _fmt(v: Any, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(results: Result) -> str:
    """The whole result as plain-text tables."""
    m = results["meta"]
    lines = [
        f"s2_sink benchmark  {m['date']}  cores={m['cores']}  load(1m) start={m['load_start']:.2f} "
        f"end={m['load_end']:.2f}  data={m.get('data', 'events')}  rows={m['rows']:,}  "
        f"partitions={m['partitions']}  "
        f"json bytes/row={m['json_bytes_per_row']:.1f}  mode={'quick' if m['quick'] else 'full'}  "
        f"wall={m['elapsed_s']:.0f}s  cpu={m['run_cpu_s']:.0f}s  best of {m['repeat']} round(s)",
        "",
    ]
    head = (
        f"{'case':<46} {'rows/s':>10} {'MB/s':>7} {'py us/rec':>9} {'jvm us':>7} {'client us':>9} "
        f"{'lite us':>7} {'wkr MiB':>7} {'drv MiB':>7} {'x json':>6} {'x naive':>7}  read-back"
    )
    lines += [
        "CPU per record: client us = py + jvm, the sink's measure; lite us = the lite server, in its own "
        "process, reported apart (no target)",
        head,
        "-" * len(head),
    ]
    for c in results["cases"]:
        label = f"({c['index']}) {c['label']}"
        if c["status"] != "ok":
            lines.append(f"{label:<46} {c['status'].upper()}: {c['reason']}")
            continue
        lines.append(
            f"{label:<46} {c['rows_per_s']:>10,.0f} {c['mb_per_s']:>7.1f} {c['py_cpu_us_per_rec']:>9.2f} "
            f"{c['jvm_cpu_us_per_rec']:>7.2f} {client_cpu(c):>9.2f} {c['lite_cpu_us_per_rec']:>7.2f} "
            f"{c['worker_peak_rss_mib']:>7.0f} {c['driver_peak_rss_mib']:>7.0f} "
            f"{_fmt(c['vs_json'], '.2f'):>6} {_fmt(c['vs_naive'], '.2f'):>7}  {c['read_back']}"
        )
    st = results.get("streaming", {})
    lines += ["", f"micro-batch sink latency ({st.get('rows_per_batch', 1000)} rows/batch, foreachBatch):"]
    for key, s in st.get("sinks", {}).items():
        if s.get("status") != "ok":
            lines.append(f"  {key:<14} {s.get('status', '').upper()}: {s.get('reason', '')}")
            continue
        extra = st.get("beyond_noop", {}).get(key)
        tail = (
            f"   beyond noop: median {extra['median_ms']:.1f} ms, p99 {extra['p99_ms']:.1f} ms"
            if extra
            else ""
        )
        lines.append(
            f"  {key:<14} median {s['median_ms']:7.1f} ms  p99 {s['p99_ms']:7.1f} ms  (n={int(s['n'])}){tail}"
        )
    for fs in results.get("format_streaming", []):
        head = f"writeStream.format('s2'), {fs['rows_per_batch']:,} rows/batch, addBatch per micro-batch:"
        if fs.get("status") == "error":
            lines += ["", f"{head} ERROR: {fs.get('reason', '')}"]
            continue
        lines += ["", head]
        for mode, m in fs["modes"].items():
            lines.append(f"  {mode:<14} median {m['median_ms']:7.1f} ms  mean {m['mean_ms']:7.1f} ms")
        lines.append(
            f"  exactly-once / at-least-once: {fs['eo_vs_alo_ratio']:.2f}x "
            f"({fs['eo_over_alo_ms']:+.1f} ms median)"
        )
    sp = results.get("single_partition", {})
    lines.append("")
    if sp.get("status") == "ok":
        lines.append(
            f"single partition of {sp['rows']:,} rows via {sp['via']}: peak Python worker RSS "
            f"{sp['worker_peak_rss_mib']:.0f} MiB, {sp['rows_per_s']:,.0f} rows/s"
        )
    else:
        lines.append(f"single partition: {sp.get('status', 'n/a').upper()}: {sp.get('reason', '')}")
    li = results.get("lite_ingest", {})
    if li.get("status") == "ok":
        lines.append(f"lite server ingest (the server's own rate, no target): {li['summary']}")
    else:
        lines.append(f"lite server ingest: {li.get('status', 'n/a').upper()}: {li.get('reason', '')}")
    lines += _routed_lines(results.get("routed", {}))
    lines += read_many_lines(results.get("read_many", {}))
    diag = results.get("diagnostics", {}).get("s2writer_no_null_headers", {})
    if diag.get("status") == "ok":
        w = _case(results, "s2writer")
        ratio = f" = {diag['rows_per_s'] / w['rows_per_s']:.2f}x row (5)" if w else ""
        lines.append(
            f"diagnostic: {diag['label']}: {diag['rows_per_s']:,.0f} rows/s{ratio}, "
            f"Python {diag['py_cpu_us_per_rec']:.2f} us/rec, JVM {diag['jvm_cpu_us_per_rec']:.2f} us/rec"
        )
    lines += ["", "targets:"]
    for t in results["targets"]:
        val = "-" if t["value"] is None else f"{t['value']:.2f} {t['unit']}"
        note = f"  ({t['note']})" if t["note"] else ""
        lines.append(f"  [{t['status'].upper():>4}] {t['name']}: {val} (target {t['bound']}){note}")
    return "\n".join(lines)


def _routed_lines(r: Result) -> list[str]:
    if r.get("status") != "ok":
        return [f"routed: {r.get('status', 'n/a').upper()}: {r.get('reason', '')}"]
    lines = [
        f"routed ({r['label']}; {r['batches']} measured micro-batch(es) after a first that creates "
        "the streams):",
        f"  {'writer':<10} {'delivery':<14} {'streams':>7} {'tasks':>5} {'first s':>8} {'median s':>8} "
        f"{'py us/row':>9} {'jvm us':>7} {'client us':>9} {'lite us':>7}  read-back",
    ]
    for key, w in r["writers"].items():
        lines.append(
            f"  {key:<10} {w['delivery']:<14} {w['streams']:>7,} {w['write_tasks'] or 0:>5} "
            f"{w['first_batch_s']:>8.2f} {w['median_batch_s']:>8.2f} {w['py_cpu_us_per_row']:>9.2f} "
            f"{w['jvm_cpu_us_per_row']:>7.2f} {w['client_cpu_us_per_row']:>9.2f} "
            f"{w['lite_cpu_us_per_row']:>7.2f}  {w['read_back']}"
        )
    return lines


def _k(v: float) -> str:
    return f"{v:,.0f}k" if v >= 100 else f"{v:.1f}k"


def chart(results: Result, path: str) -> None:
    """Top: throughput, Python CPU per record and peak Python RSS of every case. Bottom: micro-batch sink
    latency per streaming sink, and the targets."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = list(reversed(results["cases"]))
    labels = [f"({c['index']}) {c['label']}" for c in cases]
    status = [c["status"] for c in cases]
    ys = list(range(len(cases)))
    fig = plt.figure(figsize=(17, 0.5 * len(cases) + 6.2))
    grid = fig.add_gridspec(2, 3, height_ratios=[0.5 * len(cases) + 1, 3.6])
    axes = [fig.add_subplot(grid[0, 0])]
    axes += [fig.add_subplot(grid[0, i], sharey=axes[0]) for i in (1, 2)]
    m = results["meta"]
    fig.suptitle(
        f"s2_sink vs Spark sinks and naive S2 writes — "
        f"{m['rows']:,} rows x {m['json_bytes_per_row']:.0f} B JSON, {m['spark']}, "
        f"{m['cores']} cores shared (load {m['load_start']:.1f}-{m['load_end']:.1f}), {m['date']}",
        fontsize=11,
    )

    def panel(
        ax: Any, values: list[float | None], title: str, fmt: Callable[[float], str], color: str
    ) -> None:
        bars = [v if v is not None else 0.0 for v in values]
        ax.barh(ys, bars, color=color)
        top = max(bars) if any(bars) else 1.0
        for y, v, st in zip(ys, values, status, strict=True):
            text = fmt(v) if st == "ok" and v is not None else st
            ax.text((v or 0) + top * 0.01, y, text, va="center", fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.set_xlim(0, top * 1.35)
        ax.grid(axis="x", alpha=0.3)

    def col(key: str) -> list[float | None]:
        return [c.get(key) if c["status"] == "ok" else None for c in cases]

    thr = [v / 1000 if v is not None else None for v in col("rows_per_s")]
    panel(axes[0], thr, "throughput (k rows/s, higher is better)", _k, "#3b7dd8")
    for y, c in zip(ys, cases, strict=True):
        if c["status"] == "ok" and c.get("vs_naive") and c["key"] != "naive":
            axes[0].text(0, y - 0.32, f" {c['vs_naive']:.2f}x naive", fontsize=7, color="#333")
    cpu = col("py_cpu_us_per_rec")
    panel(axes[1], cpu, "Python CPU per record (us, lower is better)", lambda v: f"{v:.2f}", "#e07b39")
    rss = [
        max(c["worker_peak_rss_mib"], c["driver_peak_rss_mib"] if c["key"] == "naive" else 0.0)
        if c["status"] == "ok"
        else None
        for c in cases
    ]
    panel(axes[2], rss, "peak Python RSS (MiB; naive: the driver)", lambda v: f"{v:.0f}", "#5aa469")
    axes[0].set_yticks(ys)
    axes[0].set_yticklabels(labels, fontsize=9)
    for ax in axes[1:]:
        ax.tick_params(labelleft=False)

    lat = fig.add_subplot(grid[1, :2])
    sinks = results.get("streaming", {}).get("sinks", {})
    names = list(sinks)
    xs = range(len(names))
    med = [sinks[n].get("median_ms", 0.0) for n in names]
    p99 = [sinks[n].get("p99_ms", 0.0) for n in names]
    lat.bar([x - 0.2 for x in xs], med, width=0.4, label="median", color="#3b7dd8")
    lat.bar([x + 0.2 for x in xs], p99, width=0.4, label="p99", color="#9bbbe8")
    for x, n in zip(xs, names, strict=True):
        if sinks[n].get("status") != "ok":
            lat.text(x, 0, sinks[n].get("status", ""), ha="center", va="bottom", fontsize=8)
        else:
            lat.text(x - 0.2, med[x], f"{med[x]:.0f}", ha="center", va="bottom", fontsize=8)
            lat.text(x + 0.2, p99[x], f"{p99[x]:.0f}", ha="center", va="bottom", fontsize=8)
    lat.set_xticks(list(xs))
    lat.set_xticklabels(names, fontsize=9)
    lat.set_ylabel("ms per micro-batch")
    lat.set_title("sink latency of a 1k-row micro-batch (same batches, foreachBatch)", fontsize=10)
    lat.legend(fontsize=8)
    lat.grid(axis="y", alpha=0.3)

    txt = fig.add_subplot(grid[1, 2])
    txt.axis("off")
    lines = ["targets"]
    for t in results.get("targets", []):
        val = "-" if t["value"] is None else f"{t['value']:.2f} {t['unit']}"
        lines.append(f"[{t['status'].upper()}] {t['name']}\n        {val}  (target {t['bound']})")
    txt.text(0, 1, "\n".join(lines), va="top", ha="left", fontsize=8.5, family="monospace")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
