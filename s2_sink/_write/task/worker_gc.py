"""A write task's Python worker keeps what it imported out of the garbage collector's full collections.

PySpark's daemon runs ``gc.collect()`` after every task of a reused worker: a full collection, which walks
every object the collector tracks, most of them the modules the worker imported (PySpark, pyarrow, the S2
SDK, h2, protobuf, this package), which never become garbage. After its first write task a worker moves
the objects alive then into the collector's permanent generation (``gc.freeze``), once, after a collection
so that no garbage is kept: the collections after later tasks walk only what was made since. Frozen
objects are still freed when nothing refers to them; only a reference cycle among them that later becomes
garbage is not collected, and those are the survivors of one task (its connection pool, say), once. A
driver's own objects are the user's: a driver writing a batch itself freezes nothing.
"""

from __future__ import annotations

import gc

from pyspark import TaskContext

__all__ = ["freeze_imports"]

_FROZEN = [False]


def freeze_imports() -> None:
    """Freeze the objects alive now, the first time in this Spark worker (see the module docstring); in
    any other process (a driver writing a small batch itself) nothing."""
    if _FROZEN[0] or TaskContext.get() is None:
        return
    _FROZEN[0] = True
    gc.collect()
    gc.freeze()
