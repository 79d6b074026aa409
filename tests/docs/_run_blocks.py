"""Run doc blocks in this process, the way a user pastes them into one Python session against Spark.

``python -m tests.docs._run_blocks BLOCKS.json RESULTS.json``: BLOCKS.json lists ``{"id", "code"}`` (with
``"path"`` and ``"line"``, tracebacks name the markdown file and its line numbers); each block runs in a
fresh namespace holding ``spark`` (one ``local[2]`` session, created when a block first
needs it), in the current directory (the JVM resolves relative paths against it, so the caller picks it).
A block fails if it raises, or if it leaves a streaming query running (examples must terminate). RESULTS.json
maps each id to ``{"ok", "error", "seconds", "stdout"}``; it is rewritten after every block, so a crash
loses only the block it happened in.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from tests.integration.conftest import SPARK_CONF


class _LazySpark:
    """The session, created at first use (blocks that never touch Spark do not start a JVM)."""

    def __init__(self) -> None:
        self.session: Any = None

    def get(self) -> Any:
        if self.session is None:
            from pyspark.sql import SparkSession  # only when a block needs Spark

            builder = SparkSession.builder.master("local[2]").appName("s2-sink-docs")
            for key, value in SPARK_CONF.items():
                builder = builder.config(key, value)
            self.session = builder.getOrCreate()
            self.session.sparkContext.setLogLevel("ERROR")
        return self.session


def _needs_spark(code: str) -> bool:
    return "spark" in code.replace("s2_sink", "")


BLOCK_TIMEOUT_S = 150


class BlockTimeoutError(Exception):
    """A block ran longer than BLOCK_TIMEOUT_S (a query that never terminates, a call that hangs)."""


def _timed_out(signum: int, frame: object) -> None:
    raise BlockTimeoutError(f"the block ran longer than {BLOCK_TIMEOUT_S} s")


def _as_in_file(block: dict[str, Any]) -> str:
    """The code padded so that a traceback's line numbers are those of the markdown file."""
    return "\n" * int(block.get("line", 0)) + str(block["code"])


def _run(block: dict[str, Any], spark: _LazySpark) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    if _needs_spark(block["code"]):
        namespace["spark"] = spark.get()
    started = time.monotonic()
    error = None
    signal.signal(signal.SIGALRM, _timed_out)
    signal.alarm(BLOCK_TIMEOUT_S)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(_as_in_file(block), block.get("path", block["id"]), "exec"), namespace)  # the test
    except BaseException:  # noqa: BLE001  # SystemExit and KeyboardInterrupt of a block are its failure too
        error = traceback.format_exc(limit=-8)
    finally:
        signal.alarm(0)
    if spark.session is not None:
        running = spark.session.streams.active
        for query in running:
            query.stop()
        if running and error is None:
            error = f"the block left {len(running)} streaming queries running (examples must terminate)"
    seconds = round(time.monotonic() - started, 2)
    return {"ok": error is None, "error": error, "seconds": seconds, "stdout": out.getvalue()[-2000:]}


def main(blocks_path: str, results_path: str) -> None:
    blocks = json.loads(Path(blocks_path).read_text())
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = _LazySpark()
    results: dict[str, Any] = {}
    for block in blocks:
        results[block["id"]] = _run(block, spark)
        Path(results_path).write_text(json.dumps(results))
    if spark.session is not None:
        spark.session.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
