"""Build the notebooks from their sources, so they are reviewed as plain Python and stored without outputs.

Each ``sources/NN_name.py`` is split into cells at ``# %%`` lines (``# %% [markdown]`` starts a markdown
cell whose lines are ``# ``-prefixed comments). The result is written to ``NN_name.ipynb`` beside this file.

    python notebooks/build.py           # rewrite the .ipynb files
    python notebooks/build.py --check   # exit 1 if any .ipynb differs from what its source builds
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent
SOURCES = HERE / "sources"
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


def _cells(text: str) -> list[nbformat.NotebookNode]:
    cells: list[nbformat.NotebookNode] = []
    kind: str | None = None
    lines: list[str] = []

    def flush() -> None:
        body = "\n".join(lines).strip("\n")
        if kind == "markdown":
            text = [line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines()]
            body = "\n".join(text)
            cells.append(new_markdown_cell(body))
        elif kind == "code" and body:
            cells.append(new_code_cell(body))

    for line in text.splitlines():
        if line.startswith("# %%"):
            flush()
            kind = "markdown" if "[markdown]" in line else "code"
            lines = []
        elif kind is not None:
            lines.append(line)
    flush()
    return cells


def build(source: Path) -> str:
    """The notebook JSON that `source` builds (deterministic: no ids that change from run to run)."""
    nb = new_notebook(
        cells=_cells(source.read_text()),
        metadata={"kernelspec": KERNELSPEC, "language_info": {"name": "python"}},
    )
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{source.stem[:2]}-{i:03d}"
    nbformat.validate(nb)
    return nbformat.writes(nb) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a notebook is out of date")
    args = parser.parse_args(argv)
    stale = []
    for source in sorted(SOURCES.glob("[0-9]*.py")):
        target = HERE / f"{source.stem}.ipynb"
        text = build(source)
        if args.check:
            if not target.exists() or target.read_text() != text:
                stale.append(target.name)
        else:
            target.write_text(text)
    if stale:
        print("out of date (run python notebooks/build.py):", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
