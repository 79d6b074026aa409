"""The package's modules import each other without cycles, type-only imports included.

The graph is read from the source with `ast` (nothing is imported): every ``import``/``from ... import``
anywhere in a module, under ``if TYPE_CHECKING:`` and inside functions too, is an edge to the module it
names (``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _modules(root: Path, package: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _targets(node: ast.Import | ast.ImportFrom, module: str, path: Path, known: set[str]) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names if alias.name in known)
        return
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        anchor = package[: len(package) - (node.level - 1)]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            yield f"{base}.{alias.name}"
        elif base in known:
            yield base


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    modules = _modules(root, package)
    known = set(modules)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[name].update(t for t in _targets(node, name, path, known) if t != name)
    return graph


@functools.cache
def _parsed_package() -> dict[str, frozenset[str]]:
    return {name: frozenset(targets) for name, targets in import_graph(ROOT, "s2_sink").items()}


def package_graph() -> dict[str, set[str]]:
    """The package's import graph, parsed once per session (each test gets its own copy)."""
    return {name: set(targets) for name, targets in _parsed_package().items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module, as a path that
    starts and ends at the same module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm; the package is small enough to recurse
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_path_within(graph, component) for component in components]


def _path_within(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:  # breadth-first, inside the component, back to the start
        v = queue.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                return [*paths[v], start]
            if w not in paths:
                paths[w] = [*paths[v], w]
                queue.append(w)
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


_LITE = "s2_sink.lite"


def _in_lite(cycle: list[str]) -> bool:
    return all(m == _LITE or m.startswith(_LITE + ".") for m in cycle)


def test_the_graph_sees_type_only_and_relative_imports(tmp_path: Path) -> None:
    """The graph includes imports under ``if TYPE_CHECKING:``, relative imports and ``from pkg import
    module``, and the cycle finder names a cycle made only of such imports."""
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from . import b\n")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import b\n"
    )
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph == {
        "pkg": set(),
        "pkg.a": {"pkg.sub.b"},
        "pkg.c": {"pkg.a"},
        "pkg.sub": {"pkg.sub.b"},
        "pkg.sub.b": {"pkg.a"},
    }
    assert cycles(graph) == [["pkg.a", "pkg.sub.b", "pkg.a"]]


def test_the_real_graph_has_the_edges_it_should() -> None:
    """A check that the walk reads the package: known runtime and type-only edges are there."""
    graph = package_graph()
    assert "s2_sink._write.driver.routing" in graph["s2_sink._write.spec"]
    assert (
        "s2_sink._write.driver.metrics" in graph["s2_sink._write.driver.delivery"]
    )  # under TYPE_CHECKING only
    assert "s2_sink.writer" not in graph["s2_sink._write.driver.delivery"]


def test_no_import_cycles_in_the_package() -> None:
    """No two modules of s2_sink (outside the lite server) import each other, directly or around a loop."""
    found = [c for c in cycles(package_graph()) if not _in_lite(c)]
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_no_import_cycles_in_the_lite_server() -> None:
    """No two modules of the lite server import each other, directly or around a loop."""
    found = [c for c in cycles(package_graph()) if _in_lite(c)]
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


# The layers, lowest first. A module may import its own layer and any layer below it; `allowed` names the
# few edges upward that are part of a contract (each with its reason).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "s2_sink.errors",
        "s2_sink._version",
        "s2_sink._option_map",
        "s2_sink._logging",
        "s2_sink._crashpoints",
        "s2_sink._pyspark",
        "s2_sink._stream_names",
        "s2_sink._frame_names",
    ),
    ("s2_sink._env_hints",),
    ("s2_sink.config",),
    ("s2_sink._transport",),
    ("s2_sink.encoders", "s2_sink._wire"),
    ("s2_sink._exactly_once",),
    ("s2_sink._read", "s2_sink._write"),
    ("s2_sink.datasource", "s2_sink.writer", "s2_sink.cli", "s2_sink.testing", "s2_sink.demo", "s2_sink"),
)
ALLOWED_UPWARD = {
    # The exactly-once hooks implement the write plan's seams (`ChunkTagger`, `RecordFilter`, ...) and lay a
    # replay out on the plan: the plan is the contract between the write path and exactly-once.
    ("s2_sink._exactly_once.epoch_plan", "s2_sink._write.write_plan"),
}


def _layer(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            inside = module == prefix or module.startswith(prefix + ".")
            if inside and (best is None or len(prefix) > best[0]):
                best = (len(prefix), i)
    return None if best is None else best[1]


def test_layers_import_only_downward() -> None:
    """Transport knows nothing of the encoders and the wire format, and neither of them of the write or read
    paths; exactly-once imports nothing back from the
    write path but its plan (the seams it implements); the read and write paths do not import each other's
    front doors; nothing below the front doors imports them."""
    graph = package_graph()
    wrong = []
    for module, targets in graph.items():
        if _in_lite([module]):
            continue
        here = _layer(module)
        assert here is not None, f"{module} is in no layer: add it to LAYERS"
        for target in targets:
            there = _layer(target)
            if there is not None and there > here and (module, target) not in ALLOWED_UPWARD:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the layering: " + "; ".join(sorted(wrong))


def test_read_and_write_paths_are_apart() -> None:
    """The read path (`_read`) and the write path (`_write`) share lower layers, never each other."""
    graph = package_graph()
    crossing = [
        f"{m} -> {t}"
        for m, targets in graph.items()
        for t in targets
        if (m.startswith("s2_sink._read") and t.startswith("s2_sink._write"))
        or (m.startswith("s2_sink._write") and t.startswith("s2_sink._read"))
    ]
    assert not crossing, "; ".join(crossing)


# The read path by stage: each stage (a module or a package of `_read`) may import the stages it names, and
# itself; nothing else of `_read`.
READ_STAGES: dict[str, frozenset[str]] = {
    "s2_sink._read": frozenset(),
    "s2_sink._read.read_options": frozenset(),
    # Record columns into rows: pure Arrow over the wire's columns; knows no S2 call and no planning.
    "s2_sink._read.rows": frozenset({"s2_sink._read.read_options"}),
    # A task's S2 reads, its ranges on read sessions or unary reads: knows nothing of formats or planning.
    "s2_sink._read.session": frozenset(),
    # The unit of work the planning makes: plain data, pickled to the task.
    "s2_sink._read.partition": frozenset(),
    # The driver's planning: its lookups go through the session's error words, never through the rows.
    "s2_sink._read.planning": frozenset(
        {"s2_sink._read.read_options", "s2_sink._read.session", "s2_sink._read.partition"}
    ),
}


def _read_stage(module: str) -> str | None:
    inside = [s for s in READ_STAGES if module == s or module.startswith(s + ".")]
    return max(inside, key=len) if inside else None


def test_read_stages_import_only_the_stages_below() -> None:
    """Rows, session and planning of the read path stay apart: rows never call S2 or plan, the session never
    builds rows or plans, planning never builds rows; only the Spark adapter (`datasource/`) joins them."""
    graph = package_graph()
    wrong = []
    for module, targets in graph.items():
        stage = _read_stage(module)
        if stage is None:
            continue
        for target in targets:
            there = _read_stage(target)
            if there is not None and there != stage and there not in READ_STAGES[stage]:
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports against the read stages: " + "; ".join(sorted(wrong))


def test_every_read_module_is_in_a_stage() -> None:
    """A new module of `_read` belongs to a stage (the package itself holds none of the read)."""
    graph = package_graph()
    loose = [m for m in graph if m.startswith("s2_sink._read.") and _read_stage(m) == "s2_sink._read"]
    assert not loose, f"add to READ_STAGES or move into a stage: {loose}"


def test_the_spark_adapter_reads_through_the_stages() -> None:
    """`datasource/` adapts Spark's API: its readers call the planning, the session and the rows, never what
    lies below them (the planning's S2 lookups, the session's decoding of ``ReadBatch`` messages)."""
    graph = package_graph()
    below = ("s2_sink._read.planning.lookups", "s2_sink._wire.read_batch")
    direct = [
        f"{m} -> {t}"
        for m, targets in graph.items()
        if m.startswith("s2_sink.datasource")
        for t in targets
        if t.startswith(below)
    ]
    assert not direct, "; ".join(sorted(direct))


def test_no_two_modules_share_a_name() -> None:
    """A module's file name says what it holds, once in the package (``__init__``/``__main__`` aside)."""
    by_name: dict[str, set[str]] = {}
    for path in sorted((ROOT / "s2_sink").rglob("*.py")):
        if path.stem in ("__init__", "__main__"):
            continue
        by_name.setdefault(path.stem.lstrip("_"), set()).add(path.relative_to(ROOT).as_posix())
    shared = {name: paths for name, paths in by_name.items() if len(paths) > 1}
    assert not shared, shared


def test_the_sink_does_not_import_the_lite_server() -> None:
    """The lite server ships in the same distribution but is its own program: only the CLI's ``s2-sink lite``,
    the demo and the `testing` helpers (which start one) import it."""
    graph = package_graph()
    users = {m for m, targets in graph.items() if not _in_lite([m]) and any(_in_lite([t]) for t in targets)}
    assert users <= {"s2_sink.cli._main", "s2_sink.demo", "s2_sink.testing"}, sorted(users)
