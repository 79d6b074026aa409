"""The Python blocks of the project's markdown: every ```python fence of README.md, docs/*.md, CONTRIBUTING.md
and benchmarks/README.md.

A block whose info string is ``python no-run`` is deliberately not runnable (a fragment, a cloud-only
setting); every other Python block runs in the doc test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ROOT", "Block", "doc_files", "python_blocks"]

ROOT = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^(```+|~~~+)\s*(.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced Python block: where it starts (the fence's 1-based line) and its code."""

    path: str
    line: int
    code: str
    runnable: bool

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.code.splitlines() if line.strip()), "")


def doc_files(root: Path = ROOT) -> list[Path]:
    """README.md, every docs/*.md, CONTRIBUTING.md and benchmarks/README.md, in a stable order."""
    return [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        root / "CONTRIBUTING.md",
        root / "benchmarks" / "README.md",
    ]


def python_blocks(root: Path = ROOT) -> list[Block]:
    """Every Python block of the doc files; other languages (bash, json, text, mermaid) are skipped."""
    blocks: list[Block] = []
    for path in doc_files(root):
        lines = path.read_text(encoding="utf-8").splitlines()
        fence: str | None = None
        info = ""
        start = 0
        body: list[str] = []
        for number, line in enumerate(lines, start=1):
            match = _FENCE.match(line)
            if fence is None:
                if match:
                    fence, info, start, body = match.group(1), match.group(2).strip().lower(), number, []
                continue
            if match and line.startswith(fence) and not match.group(2).strip():
                words = info.split()
                if words and words[0] in ("python", "py"):
                    blocks.append(
                        Block(
                            path=str(path.relative_to(root)),
                            line=start,
                            code="\n".join(body) + "\n",
                            runnable="no-run" not in words[1:],
                        )
                    )
                fence = None
                continue
            body.append(line)
        if fence is not None:
            raise ValueError(f"{path.name}:{start}: code fence never closed")
    return blocks
