"""What importing format("s2") costs a fresh Python process (Spark starts one per planning step)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


def test_importing_the_data_source_and_its_writer_leaves_pandas_out() -> None:
    """Spark runs the data source's create, write-planning and commit steps each in a new Python process,
    which imports ``s2_sink.datasource`` and converts no data. pyarrow imports pandas (a third of a second
    of CPU) on its first conversion of a Python value, so no module on that path may convert one at
    import time."""
    code = (
        "import sys, s2_sink.datasource, s2_sink.datasource._writer, s2_sink.encoders; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == "[]"


def test_executors_unpickling_the_writer_import_none_of_the_read_side() -> None:
    """A task's Python worker imports the writer's module to unpickle it; the data source class and the
    reading modules stay unimported until something asks for them."""
    code = (
        "import sys, s2_sink.datasource._writer; "
        "print(sorted(m for m in sys.modules if m.startswith('s2_sink.datasource.')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.strip() == str(
        ["s2_sink.datasource._compat", "s2_sink.datasource._write_options", "s2_sink.datasource._writer"]
    )


# What a batch read task must not import: the write side, the driver's planning, and pandas (pyarrow
# imports it on a Python value's first conversion). (The encoders package, which the read formats take
# header names and the record-by-record JSON decoder from, is still imported, with pyarrow.compute.)
_NOT_IN_A_READ_TASK = (
    "pandas",
    "s2_sink._exactly_once._ledger",
    "s2_sink._wire._append_proto",
    "s2_sink.datasource._writer",
    "s2_sink.datasource._write_options",
    "s2_sink.datasource._stream_reader",
    "s2_sink.datasource._committed",
    "s2_sink.datasource._planner",
)


def test_a_read_task_imports_only_the_read_side(tmp_path: Path) -> None:
    """Spark pickles the data source and its reader into every read task, and a fresh Python worker
    (which has not imported pandas) unpickles them and calls ``read``: what their
    modules import at top level, and what reading a partition imports, is paid per task (a third of a
    second of CPU for pandas alone). Neither the write side, nor the driver's planning, nor pandas is
    among it."""
    from pyspark import cloudpickle
    from pyspark.sql.types import LongType, StructField, StructType

    from s2_sink.datasource import S2DataSource
    from s2_sink.datasource._partition import S2Partition

    options = {
        "s2.basin": "import-cost",
        "s2.stream": "s",
        "s2.endpoints.account": "http://127.0.0.1:9",
        "s2.endpoints.basin": "http://127.0.0.1:9",
        "s2.format": "json",
        "s2.preflight": "false",
    }
    source = S2DataSource(options)
    reader = source.reader(StructType([StructField("id", LongType())]))
    task = tmp_path / "task.pickle"
    task.write_bytes(cloudpickle.dumps((source, reader, S2Partition("s", 0, 10))))
    code = (
        "import sys\n"
        "import pyspark.sql.worker.plan_data_source_read  # the worker's own read function\n"
        "before = set(sys.modules)\n"
        "from pyspark import cloudpickle\n"
        f"source, reader, partition = cloudpickle.loads(open({str(task)!r}, 'rb').read())\n"
        "import s2_sink.datasource._read_task  # what read() imports\n"
        "import s2_sink._wire._read_batch, s2_sink.datasource._json_bulk\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    imported = ast.literal_eval(out.stdout.strip())
    assert "s2_sink.datasource._read_task" in imported
    unwanted = [m for m in imported if m.startswith(_NOT_IN_A_READ_TASK)]
    assert unwanted == []
