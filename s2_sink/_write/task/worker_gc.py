"""A write task's Python worker keeps what it imported out of the garbage collector's full collections.

PySpark's daemon runs ``gc.collect()`` after every task of a reused worker, walking every tracked object,
most of them the modules imported, which never become garbage. After its first write task a worker
collects once and freezes what is alive (``gc.freeze``): later collections walk only what was made since.
Frozen objects are still freed by reference counting; only a cycle among them is never collected (one
task's survivors, once). A driver's objects are the user's: a driver freezes nothing.
"""

from __future__ import annotations

import gc

from pyspark import TaskContext

__all__ = ["freeze_imports"]

_FROZEN = [False]


def freeze_imports() -> None:
    if _FROZEN[0] or TaskContext.get() is None:
        return
    _FROZEN[0] = True
    gc.collect()
    gc.freeze()
