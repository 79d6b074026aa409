"""The SparkSession of a ``foreachBatch`` call as exactly-once's driver step reads it (classic Spark)."""

from __future__ import annotations

__all__ = ["Session"]


class Session:
    """What `ExactlyOnce.prepare` reads of ``frame.sparkSession`` in classic Spark: the conf, the driver
    thread's local properties (the query id; the run id only where the runtime sets it, `run_id_known`)
    and the query handle (``spark.streams.get(query_id).runId``, where classic Spark has the run id)."""

    def __init__(self, query_id: str, run_id: str, run_id_known: bool) -> None:
        self._query_id = query_id
        self.conf = {"spark.speculation": "false"}
        self.sparkContext = self
        self._props = {"sql.streaming.queryId": query_id}
        if run_id_known:
            self._props["sql.streaming.runId"] = run_id
        self.streams = self
        self.runId = run_id

    def getLocalProperty(self, name: str) -> str | None:
        return self._props.get(name)

    def get(self, query_id: str) -> Session | None:
        return self if query_id == self._query_id else None
