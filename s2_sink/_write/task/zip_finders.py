"""A write task leaves no zip archive's import finder in ``sys.path_importer_cache`` behind.

PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task, which on CPython 3.10
to 3.12 makes every cached ``zipimporter`` re-read its archive's directory in pure Python
(python/cpython#103200): one per package imported from ``pyspark.zip`` and per directory of the
``spark-core`` jar searched, a fixed cost per task of a reused worker. Once imports are done the finders
are not needed (a later import gets a fresh finder from zipimport's cached directory), so a task drops
them when it ends. Only in a Spark worker: on a driver a dropped finder would hide a user's rebuilt archive.
"""

from __future__ import annotations

import sys
import zipimport

from pyspark import TaskContext

__all__ = ["forget_zip_finders"]


def forget_zip_finders() -> None:
    if TaskContext.get() is None:
        return
    cache = sys.path_importer_cache
    for path, finder in list(cache.items()):
        if isinstance(finder, zipimport.zipimporter):
            del cache[path]
