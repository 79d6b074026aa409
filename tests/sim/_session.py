"""The SparkSession of a ``foreachBatch`` call as exactly-once's driver step reads it (classic Spark)."""

from __future__ import annotations

__all__ = ["Session"]


class Session:
    """What `ExactlyOnce.prepare` reads of ``frame.sparkSession`` in classic Spark: the conf, the driver
    thread's local properties (the query id) and, through py4j, the name of the JVM thread the micro-batch
    runs on, which carries the run id: ``stream execution thread for [id = <query id>, runId = <run id>]``.
    With `run_id_known` false the callback runs on another thread (``Thread-7``): the run id is unknown."""

    def __init__(self, query_id: str, run_id: str, run_id_known: bool) -> None:
        self.conf = {"spark.speculation": "false"}
        self.sparkContext = self
        self._props = {"sql.streaming.queryId": query_id}
        self._thread = (
            f"stream execution thread for [id = {query_id}, runId = {run_id}]" if run_id_known else "Thread-7"
        )
        self._jvm = self
        self.java = self
        self.lang = self
        self.Thread = self

    def getLocalProperty(self, name: str) -> str | None:
        return self._props.get(name)

    def currentThread(self) -> Session:
        return self

    def getName(self) -> str:
        return self._thread
