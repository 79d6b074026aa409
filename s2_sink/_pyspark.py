"""pyspark is an extra, not a dependency: where the package first needs it, its absence says how to get it.

A platform with its own Spark (a Databricks runtime, Databricks Connect, EMR, Dataproc) provides pyspark, and
a second one installed beside it breaks that platform; so the base install brings none, and locally it is
the ``spark`` extra. The lite server, the ``s2-sink`` command and the SDK-level modules import without it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

__all__ = ["INSTALL_HINT", "needs_pyspark", "spark_errors"]

INSTALL_HINT = (
    "for a local Spark, pip install 's2-sink[spark]'; on Databricks or another platform that ships Spark, "
    "run where its own pyspark is (do not install a second one beside it)"
)


@contextmanager
def needs_pyspark(what: str) -> Iterator[None]:
    """Around an import that needs pyspark: if pyspark is missing, raise a ModuleNotFoundError saying that
    ``what`` needs it and how to install it (chained to the original). Other import errors pass through,
    a missing pyspark submodule too (an older pyspark lacks some: the features that need them say so)."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if exc.name != "pyspark":
            raise
        raise ModuleNotFoundError(
            f"{what} needs pyspark, which is not installed: {INSTALL_HINT}", name="pyspark"
        ) from exc


@cache
def spark_errors() -> tuple[type[Exception], ...]:
    """What a failed call into Spark raises: PySpark's errors (a Spark Connect RPC's, a JVM error classic
    PySpark converts), and py4j's (a JVM error it does not convert, a method the gateway refuses or lacks,
    a lost gateway). A Connect-only install has no py4j. Called where pyspark is already in use."""
    from pyspark.errors import PySparkException  # noqa: PLC0415 - pyspark is an extra

    try:
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        return (PySparkException,)
    return (PySparkException, Py4JError)
