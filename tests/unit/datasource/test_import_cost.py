"""What importing format("s2") costs a fresh Python process (Spark starts one per planning step)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


def _python(code: str) -> str:
    """What a fresh Python process running ``code`` prints."""
    argv = [sys.executable, "-c", code]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout


def test_importing_the_data_source_and_its_writer_leaves_pandas_out() -> None:
    """Spark runs the data source's create, write-planning and commit steps each in a new Python process,
    which imports ``s2_sink.datasource`` and converts no data. pyarrow imports pandas (a third of a second
    of CPU) on its first conversion of a Python value, so no module on that path may convert one at
    import time."""
    code = (
        "import sys, s2_sink.datasource, s2_sink.datasource._spark_writers, s2_sink.encoders; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    )
    out = _python(code)
    assert out.strip() == "[]"


def test_executors_unpickling_the_writer_import_none_of_the_read_side() -> None:
    """A task's Python worker imports the writer's module to unpickle it; the data source class and the
    reading modules stay unimported until something asks for them."""
    code = (
        "import sys, s2_sink.datasource._spark_writers; "
        "print(sorted(m for m in sys.modules if m.startswith('s2_sink.datasource.')))"
    )
    out = _python(code)
    assert out.strip() == str(
        [
            "s2_sink.datasource._compat",
            "s2_sink.datasource._spark_writers",
            "s2_sink.datasource._write_keys",
            "s2_sink.datasource._write_options",
        ]
    )


def test_a_batch_write_commit_loads_neither_the_sdk_nor_protobuf() -> None:
    """Spark's commit step of ``df.write.format("s2")`` unpickles the writer and its tasks' messages in a
    Python process of its own and only sums metrics: it imports no S2 SDK, h2, protobuf or asyncio (0.2
    to 0.25 s of CPU in a fresh process; and ``google.protobuf`` would add an importer over the
    spark-core jar that PySpark re-reads before every later commit in that process)."""
    code = (
        "import pickle, sys\n"
        "from pyspark.sql.types import LongType, StructField, StructType\n"
        "from s2_sink.datasource._source import S2DataSource\n"
        "from s2_sink.datasource._spark_writers import S2CommitMessage\n"
        "opts = {'s2.basin': 'commit-basin', 's2.stream': 's', 's2.preflight': 'false',\n"
        "        's2.endpoints.account': 'http://127.0.0.1:9', 's2.endpoints.basin': 'http://127.0.0.1:9'}\n"
        "w = S2DataSource(opts).writer(StructType([StructField('id', LongType())]), False)\n"
        "sys.stdout.buffer.write(pickle.dumps((w, [S2CommitMessage([], 0.5), None])))\n"
    )
    blob = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, timeout=120).stdout
    commit = (
        "import pickle, sys\n"
        "writer, messages = pickle.loads(sys.stdin.buffer.read())\n"
        "writer.commit(messages)\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'s2_sdk', 'google', 'h2', 'asyncio'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", commit], input=blob, capture_output=True, check=True, timeout=120
    )
    assert out.stdout.decode().strip() == "[]"


def test_the_writer_options_spell_the_preflight_option_as_the_preflight_does() -> None:
    """`_write_options` and `_read_options` spell ``s2.preflight`` out instead of importing
    `s2_sink._transport.preflight` (which loads the SDK); all must name the same option."""
    from s2_sink._read.read_options import OPT_PREFLIGHT as READ_OPT_PREFLIGHT
    from s2_sink._transport.preflight import OPT_PREFLIGHT
    from s2_sink.datasource._refused_options import READ_KEYS
    from s2_sink.datasource._write_keys import OPT_PREFLIGHT as WRITE_OPT_PREFLIGHT
    from s2_sink.datasource._write_keys import WRITE_KEYS

    assert WRITE_OPT_PREFLIGHT == READ_OPT_PREFLIGHT == OPT_PREFLIGHT
    assert OPT_PREFLIGHT in WRITE_KEYS
    assert OPT_PREFLIGHT in READ_KEYS


# What a batch read task must not import: the write side, the driver's planning, and pandas (pyarrow
# imports it on a Python value's first conversion). (The encoders package, which the read formats take
# header names and the record-by-record JSON decoder from, is still imported, with pyarrow.compute.)
_NOT_IN_A_READ_TASK = (
    "pandas",
    "s2_sink._exactly_once.ledger",
    "s2_sink._wire.append.proto",
    "s2_sink.datasource._spark_writers",
    "s2_sink.datasource._write_options",
    "s2_sink._read.planning.committed",
    "s2_sink._read.planning.micro_batches",
)


def test_a_read_task_imports_only_the_read_side(tmp_path: Path) -> None:
    """Spark pickles the data source and its reader into every read task, and a fresh Python worker
    (which has not imported pandas) unpickles them and calls ``read``: what their
    modules import at top level, and what reading a partition imports, is paid per task (a third of a
    second of CPU for pandas alone). Neither the write side, nor the driver's planning, nor pandas is
    among it."""
    from pyspark import cloudpickle
    from pyspark.sql.types import LongType, StructField, StructType

    from s2_sink._read.partition import S2Partition
    from s2_sink.datasource import S2DataSource

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
    task.write_bytes(cloudpickle.dumps((source, reader, S2Partition([("s", 0, 10)]))))
    code = (
        "import sys\n"
        "import pyspark.sql.worker.plan_data_source_read  # the worker's own read function\n"
        "before = set(sys.modules)\n"
        "from pyspark import cloudpickle\n"
        f"source, reader, partition = cloudpickle.loads(open({str(task)!r}, 'rb').read())\n"
        "import s2_sink._read.partition, s2_sink._read.session  # what read() imports\n"
        "import s2_sink._read.planning.data_loss, s2_sink._read.rows.record_rows\n"
        "import s2_sink._wire.read_batch, s2_sink._read.rows.schemas\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    out = _python(code)
    imported = ast.literal_eval(out.strip())
    assert "s2_sink._read.partition" in imported
    unwanted = [m for m in imported if m.startswith(_NOT_IN_A_READ_TASK)]
    assert unwanted == []


def test_creating_the_source_and_planning_a_read_import_only_what_they_need() -> None:
    """Spark creates the data source and plans a read each in a fresh Python process, before any task runs
    (their imports add to every read's latency). Creating it imports neither the S2 SDK, nor Arrow's compute
    kernels, nor the encoders (0.36 s of CPU before they were left out); planning a read imports the SDK,
    but neither the write side, nor the encoders, nor the read formats' decoding."""
    code = (
        "import sys\n"
        "import pyspark.sql.worker.create_data_source, pyspark.sql.worker.plan_data_source_read\n"
        "from pyspark.sql.types import LongType, StructField, StructType\n"
        "before = set(sys.modules)\n"
        "from s2_sink.datasource._source import S2DataSource\n"
        "opts = {'s2.basin': 'import-cost', 's2.stream': 's', 's2.preflight': 'false',\n"
        "        's2.endpoints.account': 'http://127.0.0.1:9', 's2.endpoints.basin': 'http://127.0.0.1:9'}\n"
        "S2DataSource(opts).schema()\n"
        "created = set(sys.modules) - before\n"
        "S2DataSource({**opts, 's2.format': 'json'}).reader(StructType([StructField('id', LongType())]))\n"
        "import s2_sink._transport.preflight, s2_sink._read.planning.micro_batches\n"
        "import s2_sink._read.planning.committed  # what the preflight and partitions() import\n"
        "print(repr((sorted(created), sorted(set(sys.modules) - before - created))))\n"
    )
    out = _python(code)
    created, planned = ast.literal_eval(out.strip())
    assert "s2_sink.datasource._source" in created
    assert [
        m for m in created if m.startswith(("s2_sdk", "google", "h2", "pyarrow.compute", "s2_sink.encoders"))
    ] == []
    assert "s2_sdk" in planned
    unwanted = ("pandas", "pyarrow.compute", "s2_sink.encoders", "s2_sink.datasource._write_options")
    unwanted += ("s2_sink._read.rows.record_rows", "s2_sink._read.rows.upsert_rows")
    assert [m for m in planned if m.startswith(unwanted)] == []


_FORMATS = ("raw", "kafka", "upsert", "upsert-typed", "upsert-materialized", "json-meta")


def test_reading_any_format_leaves_pandas_out() -> None:
    """A read task's Python worker converts records into every format's columns without pyarrow importing
    pandas (a third of a second of CPU and 50 MB in every fresh worker): no conversion of a Python value or
    a numpy array through ``pa.array`` / ``pa.scalar``. One fresh process converts into each format in turn
    and reports after each whether pandas is loaded: a format that loads it is the first to say so."""
    code = (
        "import sys\n"
        "import s2_sdk._generated.s2.v1.s2_pb2 as pb\n"
        "from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType\n"
        "from s2_sink._wire.read_batch import parse_read_batch\n"
        "from s2_sink.datasource._readers import batch_of, columns_to_batch\n"
        "from s2_sink._read.rows import schemas as f\n"
        "from s2_sink._read.rows.upsert_rows import materialized_batches\n"
        "from s2_sink.encoders._arrow_types import to_arrow_schema\n"
        "batch = pb.ReadBatch()\n"
        "for i in range(4):\n"
        "    r = batch.records.add(seq_num=i, timestamp=5, body=b'{\"v\": 1}' if i % 2 else b'')\n"
        "    r.headers.add(name=b'@key', value=b'{\"id\": %d}' % (i % 2))\n"
        "    r.headers.add(name=b'@action', value=b'ud'[i % 2 : i % 2 + 1])\n"
        "    r.headers.add(name=b'@kafka-key', value=b'k')\n"
        "cols, _ = parse_read_batch(batch.SerializeToString())\n"
        "typed = StructType([StructField('id', LongType()), StructField('v', LongType()),\n"
        "                    StructField('_s2_action', StringType())])\n"
        "meta = StructType([StructField('_s2_stream', StringType()),\n"
        "                   StructField('_s2_seq_num', LongType()),\n"
        "                   StructField('_s2_timestamp', TimestampType())])\n"
        "print('before', 0, 'pandas' in sys.modules)\n"
        f"for fmt in {_FORMATS!r}:\n"
        "    if fmt == 'upsert-materialized':\n"
        "        out = list(materialized_batches(batch_of('upsert'), f.UPSERT_SCHEMA, 's', [cols],\n"
        "                                        to_arrow_schema(f.UPSERT_SCHEMA)))\n"
        "    elif fmt == 'upsert-typed':\n"
        "        out = [columns_to_batch(f.rows_kind('upsert', typed), typed, [('s', cols)])]\n"
        "    elif fmt == 'json-meta':\n"
        "        out = [columns_to_batch('json', meta, [('s', cols.take(cols.seq_nums % 2 == 1))])]\n"
        "    else:\n"
        "        schema = {'raw': f.RAW_SCHEMA, 'kafka': f.KAFKA_SCHEMA, 'upsert': f.UPSERT_SCHEMA}[fmt]\n"
        "        out = [columns_to_batch(fmt, schema, [('s', cols)])]\n"
        "    print(fmt, sum(b.num_rows for b in out), 'pandas' in sys.modules)\n"
    )
    lines = [line.split() for line in _python(code).splitlines()]
    assert [fmt for fmt, _, _ in lines] == ["before", *_FORMATS]
    assert [(fmt, pandas) for fmt, _, pandas in lines if pandas != "False"] == []
    assert [fmt for fmt, rows, _ in lines[1:] if int(rows) == 0] == []


def test_the_schemas_spell_the_record_frames_timestamp_column_as_the_frame_does() -> None:
    """`schemas` takes ``_s2_timestamp`` from the shared leaf module, not from the encoders; both agree."""
    from s2_sink._read.rows.schemas import META_COLUMNS
    from s2_sink.encoders._frame import TIMESTAMP

    assert TIMESTAMP in META_COLUMNS
