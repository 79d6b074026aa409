"""A write task leaves no zip archive's import finder in ``sys.path_importer_cache`` behind.

PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task. On CPython 3.10 to
3.12 that makes every cached ``zipimporter`` re-read its archive's whole directory, in pure Python
(python/cpython#103200; 3.13 only drops the cache). A worker caches one such finder per package it
imported from ``pyspark.zip`` and per directory of the ``spark-core`` jar searched (both on the worker's
``sys.path`` however PySpark is installed), so the call re-reads those archives once per finder, on every
task of a reused worker: a fixed cost per task that a write's own work per record is measured against.

Once the task's imports are done the finders are not needed: a module imported stays in ``sys.modules``,
and a later import that searches an archive again gets a fresh finder built from the directory zipimport
keeps per archive (``zipimport._zip_directory_cache``), without re-reading the archive. So a write task
drops them when it ends, and the next task's ``invalidate_caches`` has no archive to re-read. A file added
to the job later (``addPyFile``) is a new path, read when it is first searched.

Only in a Spark worker: a driver writing a small batch itself runs no PySpark task upkeep, and there a
dropped finder would stop ``importlib.invalidate_caches()`` from seeing a user's rebuilt archive (zipimport
would keep serving the directory it read first).
"""

from __future__ import annotations

import sys
import zipimport

from pyspark import TaskContext

__all__ = ["forget_zip_finders"]


def forget_zip_finders() -> None:
    """Remove the zip archives' finders from ``sys.path_importer_cache`` in a Spark worker; in any other
    process (a driver writing a small batch itself) nothing. See the module docstring."""
    if TaskContext.get() is None:
        return
    cache = sys.path_importer_cache
    for path, finder in list(cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del cache[path]
