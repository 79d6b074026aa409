"""The shape of the project's markdown: a short README that starts with the install, links that resolve,
an options page that names every option, and install steps naming the dependencies the package declares.

No Spark and no server: these read the files (and the package's own option tables) only.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

from s2_sink import S2Config, S2Writer
from s2_sink.config import OPTION_KEYS
from s2_sink.datasource._refused_options import READ_KEYS
from s2_sink.datasource._write_keys import WRITE_KEYS
from tests.docs._blocks import ROOT, doc_files

README = ROOT / "README.md"
README_MAX_LINES = 250
_FENCE = re.compile(r"^(```+|~~~+)")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _outside_fences(text: str) -> list[str]:
    """The lines of a markdown text that are not inside a fenced code block (fences blanked)."""
    lines: list[str] = []
    fence: str | None = None
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)
            lines.append("")
        elif fence is not None:
            if line.startswith(fence) and not line[len(fence) :].strip():
                fence = None
            lines.append("")
        else:
            lines.append(line)
    return lines


def _fenced_blocks(text: str) -> list[str]:
    """The bodies of the fenced code blocks of a markdown text, in order."""
    blocks: list[str] = []
    fence: str | None = None
    body: list[str] = []
    for line in text.splitlines():
        match = _FENCE.match(line)
        if fence is None:
            if match:
                fence, body = match.group(1), []
        elif line.startswith(fence) and not line[len(fence) :].strip():
            blocks.append("\n".join(body))
            fence = None
        else:
            body.append(line)
    return blocks


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a markdown file (repeated headings get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in _outside_fences(path.read_text(encoding="utf-8")):
        match = _HEADING.match(line)
        if not match:
            continue
        slug = _slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """Relative links of a markdown file whose target file or heading anchor is missing (named from root)."""
    text = "\n".join(_outside_fences(path.read_text(encoding="utf-8")))
    broken: list[str] = []
    for target in _LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (path.parent / file_part).resolve() if file_part else path
        if not resolved.exists():
            broken.append(f"{target} (no file {resolved.relative_to(root)})")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target} (no heading with anchor #{anchor} in {resolved.relative_to(root)})")
    return broken


def test_readme_is_short() -> None:
    """The README is a front door of at most 250 lines; the manual lives in docs/."""
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines, more than {README_MAX_LINES}"


def test_readme_first_code_block_is_pip_install() -> None:
    """The first fenced code block of the README installs the package with pip."""
    blocks = _fenced_blocks(README.read_text(encoding="utf-8"))
    assert blocks, "README.md has no code block"
    first = [line.strip() for line in blocks[0].splitlines() if line.strip()]
    assert first, "the README's first code block is empty"
    assert all(line.startswith("pip install ") for line in first), f"first code block: {first}"


def test_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    """The checker reports a missing file and a missing anchor, and accepts a good link (so it can fail)."""
    page = tmp_path / "page.md"
    page.write_text(
        "# Title\n\n## A `code` heading: yes\n\n[ok](#a-code-heading-yes) [bad](#nope) [x](x.md)\n"
    )
    assert anchors(page) == {"title", "a-code-heading-yes"}
    assert broken_links(page, root=tmp_path) == [
        "#nope (no heading with anchor #nope in page.md)",
        "x.md (no file x.md)",
    ]


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path: Path) -> None:
    """Every relative link of the project's markdown names an existing file, and an existing heading there."""
    assert broken_links(path) == []


def test_options_page_names_every_option() -> None:
    """docs/options.md names every S2Config field and option key, every S2Writer argument and every
    format("s2") read and write option, so an option added to the code is documented."""
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    named = {word for span in re.findall(r"`([^`]+)`", text) for word in re.findall(r"[\w.-]+", span)}
    fields = {f.name for f in dataclasses.fields(S2Config)}
    arguments = set(inspect.signature(S2Writer.__init__).parameters) - {"self"}
    missing = sorted((set(OPTION_KEYS) | READ_KEYS | WRITE_KEYS | fields | arguments) - named)
    assert missing == []
