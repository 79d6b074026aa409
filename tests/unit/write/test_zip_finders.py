"""A write task leaves no zip archive's finder for PySpark's per-task ``importlib.invalidate_caches()``."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
import zipfile
import zipimport
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyspark import TaskContext

from s2_sink._write.task.partition_writer import write_partition
from s2_sink._write.task.zip_finders import forget_zip_finders
from s2_sink._write.write_plan import PartitionContext, WritePlan
from s2_sink.lite import LiteServer
from tests.unit.write.test_partition_writer import config, frame


@pytest.fixture
def in_spark_task(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process as a Spark worker running a task (what PySpark's worker sets up first); not
    ``TaskContext()``, whose constructor would outlive the test."""
    monkeypatch.setattr(TaskContext, "_taskContext", object.__new__(TaskContext))


def _zip_finders() -> list[str]:
    return [p for p, f in sys.path_importer_cache.items() if isinstance(f, zipimport.zipimporter)]


@pytest.fixture
def zipped_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An archive on ``sys.path`` holding the package ``zf_pkg`` (modules ``inner`` and ``later``), with
    ``zf_pkg.inner`` imported from it, as a Spark worker imports pyspark from ``pyspark.zip``."""
    archive = tmp_path / "zf_pkgs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("zf_pkg/__init__.py", "")
        zf.writestr("zf_pkg/inner.py", "VALUE = 1\n")
        zf.writestr("zf_pkg/later.py", "VALUE = 2\n")
    monkeypatch.syspath_prepend(str(archive))
    for name in ("zf_pkg", "zf_pkg.inner", "zf_pkg.later"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    importlib.import_module("zf_pkg.inner")
    return archive


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The archives zipimport reads the directory of, from now on."""
    reads: list[str] = []
    read: Callable[[str], Any] = zipimport._read_directory  # type: ignore[attr-defined]

    def counted(archive: str) -> Any:
        reads.append(archive)
        return read(archive)

    monkeypatch.setattr(zipimport, "_read_directory", counted)
    return reads


@pytest.mark.usefixtures("in_spark_task")
def test_invalidate_caches_rereads_no_archive_once_the_finders_are_forgotten(
    zipped_package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert any(p.startswith(str(zipped_package)) for p in _zip_finders())
    forget_zip_finders()
    assert _zip_finders() == []
    reads = _count_reads(monkeypatch)
    importlib.invalidate_caches()  # what PySpark's worker calls at the start of every task
    assert str(zipped_package) not in reads


@pytest.mark.usefixtures("in_spark_task")
def test_a_module_imported_later_from_the_archive_still_imports_without_a_reread(
    zipped_package: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    forget_zip_finders()
    reads = _count_reads(monkeypatch)
    later = importlib.import_module("zf_pkg.later")
    assert later.VALUE == 2
    assert str(zipped_package) not in reads  # a fresh finder over the archive's directory kept by zipimport


@pytest.mark.usefixtures("in_spark_task")
def test_other_finders_stay(zipped_package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A directory's finder (and a path no finder takes) are left alone."""
    directory = importlib.machinery.FileFinder(str(tmp_path))
    monkeypatch.setitem(sys.path_importer_cache, str(tmp_path), directory)
    monkeypatch.setitem(sys.path_importer_cache, str(tmp_path / "nothing"), None)
    forget_zip_finders()
    assert sys.path_importer_cache[str(tmp_path)] is directory
    assert str(tmp_path / "nothing") in sys.path_importer_cache


@pytest.mark.usefixtures("in_spark_task")
def test_a_write_task_ends_with_no_zip_finder(zipped_package: Path, lite: LiteServer, basin: str) -> None:
    """`write_partition` (every write task's body) drops them as it ends, so the worker's next task does
    not re-read the archives it imported from."""
    plan = WritePlan(cfg=config(lite, basin), batch_id=0, stream="events")
    result = write_partition(plan, [frame([b"a", b"b"])], PartitionContext(0, 0, 0, 0, 0))
    assert result.to_pylist()[0]["rows_in"] == 2
    assert _zip_finders() == []


def test_a_driver_write_keeps_the_drivers_zip_finders(
    zipped_package: Path, lite: LiteServer, basin: str
) -> None:
    """A driver writing a small batch itself (no Spark task) leaves its process's import system alone: no
    PySpark worker re-reads archives there, and the user's own calls still see a rebuilt archive."""
    finders = _zip_finders()
    plan = WritePlan(cfg=config(lite, basin), batch_id=0, stream="events")
    write_partition(plan, [frame([b"a"])], PartitionContext(0, 0, 0, 0, 0))
    assert _zip_finders() == finders
    with zipfile.ZipFile(zipped_package, "a") as zf:  # the user rebuilds the archive with a new module
        zf.writestr("zf_pkg/added.py", "VALUE = 3\n")
    importlib.invalidate_caches()  # the documented way to see the change
    assert importlib.import_module("zf_pkg.added").VALUE == 3
