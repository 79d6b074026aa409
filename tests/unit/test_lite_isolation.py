"""Nothing in the sink imports the lite server: importing any module of ``s2_sink`` outside ``s2_sink.lite``
leaves ``s2_sink.lite`` unimported. (The ``s2-sink lite`` command and ``python -m s2_sink.demo`` start a
server, and import it inside the function that does so.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Run in a fresh interpreter: import each module in turn and name the first after which the lite server is
#: loaded (the modules imported before it did not load it, so that one did).
_PROBE = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    importlib.import_module(name)
    if "s2_sink.lite" in sys.modules:
        print(json.dumps(name))
        break
else:
    print(json.dumps(None))
"""


def sink_modules() -> list[str]:
    """Every module of the package but the lite server's and the ``__main__`` scripts (which run commands)."""
    out = []
    for path in sorted((ROOT / "s2_sink").rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[:2] == ["s2_sink", "lite"] or parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts.pop()
        out.append(".".join(parts))
    return out


def test_no_sink_module_imports_the_lite_server() -> None:
    """Each of the sink's modules, imported in turn in a fresh interpreter, leaves the server unloaded."""
    modules = sink_modules()
    assert {"s2_sink", "s2_sink.writer", "s2_sink.demo", "s2_sink.testing", "s2_sink.cli"} <= set(modules)
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps(modules)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    culprit = json.loads(proc.stdout.strip().splitlines()[-1])
    assert culprit is None, f"importing {culprit} imports s2_sink.lite"
