"""pyspark is an extra, not a dependency (a platform's own Spark breaks beside a second pyspark): where the
package first needs it, its absence says how to get it.
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
    """Around an import: a missing pyspark becomes a ModuleNotFoundError saying ``what`` needs it and how to
    install it. Other import errors pass through, a missing pyspark submodule too."""
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
    """What a failed call into Spark raises: PySpark's errors and py4j's (a Connect-only install has none)."""
    from pyspark.errors import PySparkException  # noqa: PLC0415 - pyspark is an extra

    try:
        from py4j.protocol import Py4JError  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        return (PySparkException,)
    return (PySparkException, Py4JError)
