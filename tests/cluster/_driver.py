"""A streaming query on the standalone cluster, in its own process:
``python -m tests.cluster._driver scn.json``.

It reads the scenario's JSON input (one file: one micro-batch, one map task), shuffles it
(``repartition(4)``) between the two `Gates` and writes it through ``foreachBatch(S2Writer)`` with
``trigger(availableNow=True)``. If the query fails it is started again up to ``restarts`` times in this
same process with the same writer object (a notebook re-running its cell). At the end it saves what
Spark's REST API says about the application (stage attempts, tasks, executors) as evidence that the fault
fired, and exits 0 if a run finished, 3 if every run failed.
"""

from __future__ import annotations

import json
import logging
import sys
import time
import urllib.request
from typing import Any


def main(path: str) -> int:
    with open(path, encoding="utf-8") as fh:
        scn: dict[str, Any] = json.load(fh)

    from pyspark.errors import StreamingQueryException
    from pyspark.sql import SparkSession

    from s2_sink.config import S2Config
    from s2_sink.encoders import InsertEncoder
    from s2_sink.writer import S2Writer
    from tests.cluster._gates import Gates
    from tests.cluster._procs import executor_pids

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("s2_sink").setLevel(logging.INFO)
    spark = (
        SparkSession.builder.master(scn["master"])
        .appName("s2sink-cluster-" + scn["name"])
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.port", str(scn["ui_port"]))
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.cores.max", "2")
        # Both executors take write tasks at once, whoever holds the map output.
        .config("spark.locality.wait", "0")
        # Shuffle blocks of a killed executor are fetched over the network (not read from its files left on
        # this host's disk), so its loss is a FetchFailed, fast: no external shuffle service, one fetch retry.
        .config("spark.shuffle.readHostLocalDisk", "false")
        .config("spark.shuffle.io.maxRetries", "1")
        .config("spark.shuffle.io.retryWait", "1s")
        .config("spark.task.maxFailures", str(scn.get("max_failures", 4)))
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.executorEnv.PYTHONPATH", scn["pythonpath"])
        .config("spark.executorEnv.S2SINK_CRASH_PLAN", scn["plan"])
        .getOrCreate()
    )
    sc = spark.sparkContext
    sc.setLogLevel("WARN")  # keeps FetchFailed and lost-executor warnings in the driver log
    tracker = sc._jsc.sc().statusTracker()
    deadline = time.monotonic() + 120
    while len(tracker.getExecutorInfos()) < 3:  # the driver counts as one
        if time.monotonic() > deadline:
            raise RuntimeError("the two executors did not register within 120s")
        time.sleep(0.5)
    app_id = sc.applicationId
    evidence: dict[str, Any] = {"app_id": app_id, "executor_pids": executor_pids(app_id), "runs": []}

    cfg = S2Config(
        basin=scn["basin"],
        stream=scn["stream"],
        access_token="test-token",
        account_endpoint=scn["endpoint"],
        basin_endpoint=scn["endpoint"],
        request_timeout_ms=5000,
        max_retries=2,
        retry_delay_ms=20,
        batch_max_records=scn.get("batch_max_records", 50),
        create_streams=True,
        # These scenarios kill executors mid-write and fail shuffle fetches under the write: the executors'
        # path, with the write stage in the partitions the scenario shaped.
        driver_write_max_rows=0,
        write_parallelism=scn.get("write_parallelism", 4),
    )
    # The gates' victims are write tasks of the 4-way repartition below: keep 2 x cores of them (what `auto`
    # gives a batch of unknown size) rather than one per core for these small known-size files.
    writer = S2Writer(
        cfg,
        InsertEncoder(),
        delivery=scn["delivery"],
        write_parallelism=2 * spark.sparkContext.defaultParallelism,
    )
    gates = Gates(shared=scn["shared"], victim=scn["victim"], plan=scn["plan"])

    def sink(batch_df: Any, batch_id: int) -> None:
        schema = batch_df.schema
        shuffled = batch_df.mapInArrow(gates.map_side, schema).repartition(4)
        writer(shuffled.mapInArrow(gates.write_side, schema), batch_id)

    df = spark.readStream.schema("id long, k string, v string").option("maxFilesPerTrigger", 1)
    code = 3
    for run in range(1 + scn.get("restarts", 0)):
        query = (
            df.json(scn["input_dir"])
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", scn["checkpoint"])
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination()
        except StreamingQueryException as exc:
            evidence["runs"].append({"run": run, "failed": str(exc).splitlines()[0][:500]})
            continue
        evidence["runs"].append({"run": run, "failed": None})
        code = 0
        break
    evidence |= _rest_evidence(sc.uiWebUrl or "", app_id)
    with open(scn["evidence"], "w", encoding="utf-8") as fh:
        json.dump(evidence, fh, indent=1)
    spark.stop()
    return code


def _rest_evidence(ui: str, app_id: str) -> dict[str, Any]:
    """Stage attempts (with their tasks) and executors of the application, from Spark's REST API."""

    def get(path: str) -> Any:
        # This machine's cores are shared: the UI can be slow to answer, so wait long and try again.
        for attempt in range(3):
            try:
                with urllib.request.urlopen(f"{ui}/api/v1/applications/{app_id}/{path}", timeout=60) as resp:
                    return json.load(resp)
            except OSError:
                if attempt == 2:
                    raise
                time.sleep(2)
        raise AssertionError("unreachable")

    stages = [
        {
            "stage": s["stageId"],
            "attempt": s["attemptId"],
            "status": s["status"],
            "name": s["name"],
            "failed_tasks": s.get("numFailedTasks", 0),
            "tasks": [
                {
                    "partition": t.get("partitionId", t["index"]),
                    "attempt": t["attempt"],
                    "executor": t["executorId"],
                    "status": t["status"],
                    "error": " | ".join((t.get("errorMessage") or "").splitlines()[:12])[:600],
                }
                for t in get(f"stages/{s['stageId']}/{s['attemptId']}/taskList?length=1000")
            ],
        }
        for s in get("stages")
    ]
    executors = [
        {"id": e["id"], "active": e["isActive"], "removed": e.get("removeReason", "")}
        for e in get("allexecutors")
    ]
    return {"stages": stages, "executors": executors}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
