"""The harness's worker probe times ``importlib.invalidate_caches()`` and names the zip archives it walks."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from benchmarks._worker_probe import invalidate_cost


def test_probe_counts_the_zip_importers_of_a_package_imported_from_an_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A package imported from a zip on ``sys.path`` adds zip importers (one per archive directory searched:
    the archive's and the package's), which the probe counts and names; the timed call's CPU is >= 0."""
    archive = tmp_path / "probe_pkgs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("probe_zipped_pkg/__init__.py", "")
        zf.writestr("probe_zipped_pkg/inner/__init__.py", "VALUE = 1\n")
    [before] = next(invalidate_cost(iter([]))).to_pylist()
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.delitem(sys.modules, "probe_zipped_pkg", raising=False)
    monkeypatch.delitem(sys.modules, "probe_zipped_pkg.inner", raising=False)
    __import__("probe_zipped_pkg.inner")
    [after] = next(invalidate_cost(iter([]))).to_pylist()
    assert after["zipimporters"] >= before["zipimporters"] + 2  # the archive, and the package holding `inner`
    assert "probe_pkgs.zip" in after["archives"].split(", ")
    assert after["invalidate_cpu_ms"] >= 0
