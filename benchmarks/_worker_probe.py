"""What a Python task pays before a sink's own work, measured inside the Spark Python worker.

PySpark's worker calls ``importlib.invalidate_caches()`` at the start of every task (``setup_spark_files``
in ``pyspark/worker_util.py``), and so do its planning and commit processes of a Python data source write.
On CPython 3.10 to 3.12, a ``zipimporter``'s ``invalidate_caches`` re-reads its archive's whole directory in
pure Python; 3.13 only drops the cache, to be re-read on the next lookup (python/cpython#103200, fixed by
#103208, not backported: 3.12.1 with 18 importers over ``pyspark.zip`` spends about as long as 3.11, 3.13
about nothing). The worker holds one zipimporter per package imported from ``pyspark.zip`` and the
spark-core jar, both on the worker's ``sys.path`` for any pip-installed PySpark, however the sink itself is
installed; those over the jar (5,000 entries) cost about four times one over ``pyspark.zip``, and importing
``google.protobuf`` adds one (the jar holds ``google/protobuf/*.proto``). `invalidate_cost` times that call
in the worker, so the harness can show how much of a case's per-record Python CPU is this fixed per-task
cost.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["PROBE_DDL", "invalidate_cost"]

PROBE_DDL = "zipimporters int, archives string, invalidate_cpu_ms double"


def invalidate_cost(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A ``mapInArrow`` function: the CPU one ``importlib.invalidate_caches()`` costs in this worker (the
    best of three), with the zip importers it walks, after importing what the writer's tasks import."""
    import importlib
    import sys
    import time
    import zipimport

    import pyarrow as pa

    import s2_sink._write.task.partition_writer  # noqa: F401 - the writer's tasks import it (and s2-sdk, protobuf)

    for _ in batches:
        pass
    zips = [
        key
        for key, finder in list(sys.path_importer_cache.items())
        if isinstance(finder, zipimport.zipimporter)
    ]
    costs = []
    for _ in range(3):
        t0 = time.thread_time()
        importlib.invalidate_caches()
        costs.append((time.thread_time() - t0) * 1000)
    archives = sorted(
        {key.rsplit("/", 1)[-1] if key.endswith((".zip", ".jar")) else "" for key in zips} - {""}
    )
    yield pa.RecordBatch.from_pydict(
        {"zipimporters": [len(zips)], "archives": [", ".join(archives)], "invalidate_cpu_ms": [min(costs)]},
        schema=pa.schema(
            [("zipimporters", pa.int32()), ("archives", pa.string()), ("invalidate_cpu_ms", pa.float64())]
        ),
    )
